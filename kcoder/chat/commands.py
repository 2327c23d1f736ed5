"""Slash commands: `cmd_<name>` methods found by reflection; the docstring is the help text
(first line: summary; a `/name ARGS` usage may follow), `completions_<name>` gives Tab
completions for the argument. A unique prefix runs a command (/ev = /eval); an unknown one
gets the nearest name suggested.
"""

from __future__ import annotations

import difflib
import shutil
from collections.abc import Callable
from pathlib import Path

from kcoder import ui
from kcoder.agent.report import commit_record
from kcoder.agent.toolbox import check_plain_build
from kcoder.chat.accepted import NotVerified, accept
from kcoder.chat.io import InputOutput
from kcoder.chat.session import BUILTIN_NOTE, ChatError, ChatSession
from kcoder.settings import BUILTIN
from kcoder.verdict import plain_build_ok
from kcoder.workspace import WorkspaceError, render_report_md

ALIASES = {"exit": "quit", "?": "help"}
KEYS = ("Enter sends · Alt-Enter (or Esc, Enter) starts a new line · Tab completes commands and "
        "paths · Ctrl-C cancels the running turn · Ctrl-D exits")


class QuitChat(Exception):
    """Raised by /quit: the REPL ends."""


class Commands:
    """The slash commands of one chat session."""

    path_args = ("diff", "eval", "bench", "profile", "save", "accept", "resume", "show")  # Tab completes file paths

    def __init__(self, session: ChatSession, io: InputOutput) -> None:
        self.session, self.io = session, io

    # --- dispatch -----------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(n[4:] for n in dir(self) if n.startswith("cmd_"))

    def matching(self, word: str) -> list[str]:
        """The command `word` names: exactly, or every command it is a prefix of."""
        word = ALIASES.get(word, word)
        names = self.names()
        return [word] if word in names else [n for n in names if n.startswith(word)]

    def run(self, line: str) -> None:
        """Run one slash command line (raises QuitChat for /quit)."""
        word, _, arg = line.strip()[1:].partition(" ")
        word, arg = word.lower(), arg.strip()
        matches = self.matching(word) if word else ["help"]
        if len(matches) > 1:
            self.io.error(f"/{word} is ambiguous: " + ", ".join(f"/{m}" for m in matches))
            return
        if not matches:
            self.unknown(word)
            return
        try:
            getattr(self, f"cmd_{matches[0]}")(arg)
        except (ChatError, NotVerified, WorkspaceError) as exc:
            self.io.error(str(exc))

    def unknown(self, word: str) -> None:
        close = difflib.get_close_matches(word, self.names(), n=1, cutoff=0.5)
        hint = f"; did you mean /{close[0]}?" if close else ""
        self.io.error(f"unknown command /{word}{hint} (/help lists the commands)")

    def completions(self, name: str, arg: str) -> list[str]:
        method: Callable[[str], list[str]] | None = getattr(self, f"completions_{name}", None)
        return [c for c in method(arg) if c.startswith(arg)] if method else []

    def _doc(self, name: str) -> str:
        return (getattr(self, f"cmd_{name}").__doc__ or "").strip()

    def _file(self, arg: str, default: Path) -> tuple[Path, str]:
        """A file the user named: absolute, else in the run directory, else from the cwd."""
        if not arg:
            return default, self.session.ws.relative(default)
        raw = Path(arg).expanduser()
        path = next((p for p in ([raw] if raw.is_absolute() else
                                 [self.session.ws.root / raw, Path.cwd() / raw]) if p.exists()), None)
        if path is None or not path.is_file():
            raise ChatError(f"{arg}: no such file (in the run directory {self.session.ws.root} "
                            "or the current directory)")
        return path, arg

    # --- commands -----------------------------------------------------------------------------
    def cmd_help(self, arg: str) -> None:
        """Show the commands, or one command's help: /help [COMMAND]"""
        if arg:
            names = self.matching(arg.lstrip("/"))
            if len(names) == 1:
                self.io.say(f"/{names[0]}: {self._doc(names[0])}")
            else:
                self.unknown(arg.lstrip("/"))
            return
        self.io.say("Type a request for the model, or a command:")
        rows = [(f"/{n}", self._doc(n).splitlines()[0]) for n in self.names()]
        self.io.lines(rows)
        self.io.note(KEYS)

    def cmd_eval(self, arg: str) -> None:
        """Build and verify the candidate on fresh inputs (correctness only): /eval [FILE]"""
        self._judge(arg, "verify")

    def cmd_bench(self, arg: str) -> None:
        """Build, verify and time the candidate against eager and torch.compile: /bench [FILE]"""
        self._judge(arg, "timing")

    def _judge(self, arg: str, stop_after: str) -> None:
        path, label = self._file(arg, self.session.ws.candidate)
        if not path.is_file():
            raise ChatError(f"{label} does not exist yet: ask the model to write it")
        verdict, new_best = self.session.judge(path, stop_after, "/eval" if stop_after == "verify" else "/bench")
        self.io.print(ui.verdict_table(verdict))
        if verdict.log and not verdict.correct:
            self.io.print_text("\n".join(verdict.log.strip().splitlines()[-30:]), "dim")
        if new_best:
            self.io.ok("★ new best verified candidate (kept in best/model_new.py)")
        sc, target = verdict.speedup_vs_compile, self.session.settings.target
        if verdict.correct and sc is not None and sc >= target:
            self.io.ok(f"target reached: {sc:.2f}x over torch.compile (target {target:.2f}x)")

    def cmd_profile(self, arg: str) -> None:
        """Profile the candidate's CUDA kernels (Nsight Compute, roofline, registers): /profile [FILE] [--full]"""
        from kcoder.problem import ProblemError

        s, words = self.session, arg.split()
        if s.options.device != "cuda":
            raise ChatError(f"/profile profiles CUDA kernels, and this session targets the "
                            f"{s.options.device} (start it with --device cuda on a GPU machine); "
                            "/bench times the candidate")
        path, label = self._file(" ".join(w for w in words if w != "--full"), s.ws.candidate)
        if not path.is_file():
            raise ChatError(f"{label} does not exist yet: ask the model to write it")
        from kcoder.profile.render import render, summary_text

        full = "--full" in words
        try:
            report = s.profile_kernels(s.ws.reference, path, s.settings.profile_options(full=full))
        except (ProblemError, ValueError) as exc:
            raise ChatError(str(exc)) from exc
        self.io.end_stream()
        render(report, self.io.console, full=full)
        s.pending_notes.append(f"[The user ran /profile on {label}; the profiler said:]\n"
                               + summary_text(report, full=full))

    def completions_profile(self, arg: str) -> list[str]:
        return ["--full"]

    def cmd_diff(self, arg: str) -> None:
        """Show how the candidate differs from the best verified one, or from FILE: /diff [FILE]"""
        ws = self.session.ws
        if not ws.candidate.is_file():
            raise ChatError("there is no candidate (model_new.py) yet")
        best = ws.best_dir / "model_new.py"
        if not arg and not best.is_file():
            self.io.note("no verified candidate yet: comparing with the reference model.py")
        other, label = self._file(arg, best if best.is_file() else ws.reference)
        shown = ui.diff(other.read_text(encoding="utf-8", errors="replace"),
                        ws.candidate.read_text(encoding="utf-8", errors="replace"),
                        label, "model_new.py")
        if shown is None:
            self.io.say(f"model_new.py and {label} are identical")
        else:
            self.io.print(shown)

    def completions_diff(self, arg: str) -> list[str]:
        ws = self.session.ws
        files = [ws.reference, ws.best_dir / "model_new.py", *sorted((ws.root / "candidates").glob("*.py"))]
        return [ws.relative(p) for p in files if p.is_file()]

    def cmd_show(self, arg: str) -> None:
        """Show a file of the run in full (default the candidate, model_new.py): /show [FILE]"""
        path, label = self._file(arg, self.session.ws.candidate)
        if not path.is_file():
            raise ChatError(f"{label} does not exist yet: ask the model to write it")
        self.io.note(f"{label} ({self.session.ws.relative(path)})")
        self.io.print(ui.code(path.read_text(encoding="utf-8", errors="replace"), path.name))

    def completions_show(self, arg: str) -> list[str]:
        return self.completions_diff(arg)

    def cmd_best(self, arg: str) -> None:
        """Show the best verified candidate: its verdict and its code."""
        best = self.session.agent.best
        if not best:
            self.io.say("no verified candidate yet: /eval checks the current one")
            return
        path = self.session.ws.best_dir / "model_new.py"
        self.io.print(ui.verdict_table(best))
        self.io.note(str(path))
        self.io.print(ui.code(path.read_text(encoding="utf-8"), "model_new.py"))

    def cmd_accept(self, arg: str) -> None:
        """Accept the candidate for /commit, if the evaluator verified it as it is now: /accept [best|FILE]"""
        ws = self.session.ws
        if arg == "best":
            path, label = ws.best_dir / "model_new.py", "the best candidate"
            if not path.is_file():
                raise ChatError("there is no verified candidate yet: /eval one first")
        else:
            path, label = self._file(arg, ws.candidate)
        accepted = accept(ws, path, label)
        self.session.accepted = accepted
        sc = accepted.verdict.speedup_vs_compile
        timing = (f"{sc:.2f}x vs torch.compile" if sc is not None else
                  "verified, not timed: /bench it first to put speed-ups in the commit message")
        self.io.ok(f"accepted {label} ({ws.relative(accepted.path)}; {timing}); /commit commits it")

    def completions_accept(self, arg: str) -> list[str]:
        return ["best"]

    def cmd_commit(self, arg: str) -> None:
        """Commit the accepted candidate to branch kcoder/<problem>; your branch, index and files stay as they are."""
        from kcoder.gitops import GitOpsError, commit_accepted

        s = self.session
        if s.accepted is None:
            raise ChatError("nothing accepted yet: /accept a verified candidate first")
        if not s.accepted.unchanged():
            raise ChatError(f"{s.accepted.path} changed since it was accepted; /eval and /accept again")
        self._check_plain_build()
        report = commit_record(s.accepted.verdict, s.model or "", s.problem.stem)
        md = render_report_md(s.report(best=s.accepted.verdict, best_path=s.accepted.path))
        try:
            result = commit_accepted(s.problem, s.accepted.path, report, report_md=md,
                                     verdict_correct=s.accepted.verdict.correct)
        except GitOpsError as exc:
            self.io.error(str(exc))
            self.io.note("(/save FILE copies the accepted kernel anywhere, without git)")
            return
        s.ws.append({"type": "commit", "commit": result.commit, "branch": result.branch})
        self.io.ok(f"committed {result.commit[:10]} on branch {result.branch} "
                   f"({', '.join(result.files)})")
        self.io.note(result.message.splitlines()[0])

    def _check_plain_build(self) -> None:
        """What is committed must pass when built exactly as plain load_inline builds it, not
        only through kcoder's faster build path (checked once per accepted candidate)."""
        s = self.session
        accepted = s.accepted
        if s.options.fast_build and accepted.verdict.plain_build != "verified":
            self.io.note(f"checking that {s.ws.relative(accepted.path)} builds and verifies as plain load_inline "
                         "builds it: every evaluation so far used kcoder's faster build, and what is committed "
                         "must build anywhere without kcoder")
        accepted.verdict = check_plain_build(s.agent.ctx, accepted.path, accepted.verdict)
        if not plain_build_ok(accepted.verdict):
            raise ChatError(f"not committed: built as plain load_inline builds it, the accepted candidate "
                            f"fails ({accepted.verdict.plain_build})")

    def cmd_undo(self, arg: str) -> None:
        """Remove the last commit kcoder made (never anyone else's)."""
        from kcoder.gitops import GitOpsError, undo_last

        try:
            result = undo_last(self.session.problem)
        except GitOpsError as exc:
            raise ChatError(str(exc)) from exc
        where = (f"branch {result.branch} is back at {result.restored_to[:10]}" if result.restored_to
                 else f"branch {result.branch} deleted (kcoder had created it)")
        self.io.ok(f"removed commit {result.removed_commit[:10]}: {where}")

    def cmd_model(self, arg: str) -> None:
        """Show the model, or switch to another one: /model [NAME]"""
        s = self.session
        if arg:
            s.set_model(arg)
        self.io.say(f"model: {s.model or '(none)'}  ·  profile {s.profile_name}  ·  "
                    f"{s.tool_mode} tool calls" + (f"  ·  {s.settings.api_base}" if s.settings.api_base else ""))
        if s.model == BUILTIN:
            self.io.note(BUILTIN_NOTE)

    def completions_model(self, arg: str) -> list[str]:
        return [BUILTIN, "anthropic/claude-sonnet-4-5", "openai/gpt-5", "gemini/gemini-2.5-pro",
                "hosted_vllm/", "ollama_chat/"]

    def cmd_skills(self, arg: str) -> None:
        """List the skills (SKILL.md workflows) the model can load."""
        from kcoder.agent.skills import list_skills

        self.io.lines(((s.name, ("" if s.valid else "[invalid: " + "; ".join(s.problems) + "] ")
                       + ui.clip(s.description, 100)) for s in list_skills()), width=30)

    def cmd_cost(self, arg: str) -> None:
        """Show tokens, model calls and cost so far."""
        u = self.session.agent.usage()
        self.io.say(f"{u.prompt_tokens:,} tokens in / {u.completion_tokens:,} out in {u.calls} model "
                    f"calls ({u.retries} retries)  ·  cost ${u.cost:.4f}")

    def cmd_save(self, arg: str) -> None:
        """Write the report; with FILE, also copy the accepted (else best) candidate there: /save [FILE]"""
        s = self.session
        s.ws.write_report(s.report())
        if arg:
            source = s.accepted.path if s.accepted else s.ws.best_dir / "model_new.py"
            if not source.is_file():
                raise ChatError("no verified candidate to save yet")
            dest = Path(arg).expanduser()
            if dest.exists():
                raise ChatError(f"{dest} exists; kcoder does not overwrite files: choose another name")
            shutil.copyfile(source, dest)
            self.io.ok(f"saved {s.ws.relative(source)} to {dest}")
        self.io.say(f"session saved in {s.ws.root} (report.md); continue later with "
                    f"/resume {s.ws.root} or kcoder chat {s.problem.name} --resume {s.ws.root}")

    def cmd_resume(self, arg: str) -> None:
        """Continue an earlier run of this problem (chat or optimize): /resume [RUN_DIR]"""
        s = self.session
        if arg:
            run_dir = Path(arg).expanduser()
        else:
            runs = [p for p in self._runs() if p != s.ws.root]
            if not runs:
                raise ChatError(f"no earlier run of {s.problem.name} in {s.runs_base()}")
            run_dir = runs[0]
        s.open_run(run_dir)
        n = len(s.agent.messages)
        self.io.ok(f"resumed {s.ws.root}: {n} messages" + (", best verified candidate kept"
                                                            if s.agent.best else ""))

    def _runs(self) -> list[Path]:
        base = self.session.runs_base()
        found = [p for p in base.glob(f"{self.session.problem.stem}-*") if (p / "meta.json").is_file()]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)

    def completions_resume(self, arg: str) -> list[str]:
        return [str(p) for p in self._runs()]

    def cmd_clear(self, arg: str) -> None:
        """Forget the conversation; the files, verdicts and best candidate stay."""
        self.session.clear()
        self.io.ok("conversation cleared")

    def cmd_quit(self, arg: str) -> None:
        """Leave the chat (Ctrl-D does too); the session stays in its run directory."""
        raise QuitChat
