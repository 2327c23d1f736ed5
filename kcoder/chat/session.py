"""One chat session: the run directory, the agent, one user message at a time, and Ctrl-C.

A user message becomes one *turn*: the agent steps (model reply, tool calls) until the model
answers without a tool call (it hands control back), calls finish, reaches the target, or a
limit. Ctrl-C interrupts the turn wherever it is: a model request is dropped, a running
evaluation's worker process group is killed (the harness's `finally` does that), and the
unanswered tool calls are answered "cancelled" so the conversation stays valid.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcoder import ui
from kcoder.agent import prompts
from kcoder.agent.llm import LLM, missing_key_message
from kcoder.agent.loop import Agent, AgentStop, FormatError, Limits, RunResult
from kcoder.agent.optimize import _system_prompt, build_report
from kcoder.agent.profiles import Profile, concrete_tool_call_mode, resolve_profile
from kcoder.agent.skills import SkillCatalog
from kcoder.agent.toolbox import Evaluator, Observation, Toolbox, ToolContext, format_verdict, stage_passed
from kcoder.chat.accepted import Accepted
from kcoder.chat.io import InputOutput
from kcoder.evaluate.options import EvalOptions
from kcoder.verdict import Verdict
from kcoder.workspace import PROTECTED, Workspace

CHAT_NOTE = """\
This is an interactive session: the user sends requests one at a time. Work on the current
request with the tools. When it is done, or when you need the user's answer, reply with
plain text and no tool call: that hands the turn back to the user (finish does too). The
user can also run the evaluator; its verdicts are quoted in their messages. Be brief."""

CANCELLED = ("Cancelled: the user pressed Ctrl-C before this call finished (a running "
             "evaluation was killed). Wait for the user's next request.")

NO_MODEL = ("no model, so only slash commands work: pick one with /model NAME (e.g. "
            "anthropic/claude-sonnet-4-5, or hosted_vllm/<served-name> with --api-base)")

_STAGES = {"build": "build", "verify": "build → verify", "timing": "build → verify → timing"}
_MAX_SHOWN = 256_000  # bytes: larger workspace files are not diffed after tool calls


class ChatError(Exception):
    """Something the user asked for cannot be done; the message says why and what to do."""


def chat_task(reference_source: str, device: str) -> str:
    """The opening of the first user message: the problem, then the user's request."""
    return (f"We are optimizing this module for the {device} target. The reference, model.py:"
            f"\n\n```python\n{reference_source.rstrip()}\n```\n\nThe candidate is model_new.py in "
            "the workspace. The user's request:\n\n")


@dataclass
class Settings:
    """What a session is started with (the `kcoder chat` options)."""

    model: str | None = None
    api_base: str | None = None
    profile: str | None = None
    tool_call: str | None = None
    target: float = 1.05
    max_cost: float | None = None
    turns_per_message: int = 30
    runs_dir: Path | None = None
    stream: bool = True


class ChatSession:
    """The state the REPL and the slash commands act on."""

    def __init__(self, problem: Path, io: InputOutput, settings: Settings,
                 options: EvalOptions, *, evaluator: Evaluator | None = None,
                 profiler: Callable[..., Any] | None = None, resume: Path | None = None) -> None:
        from kcoder.problem import load_problem

        self.io, self.settings, self.options = io, settings, options
        self._evaluator, self._profiler = evaluator, profiler  # None: the real harness
        self.problem = Path(load_problem(problem).path).resolve()  # ProblemError names the file
        self.started = time.monotonic()
        self.pending_notes: list[str] = []  # user-side events the model hears with the next message
        self.accepted: Accepted | None = None  # what /commit commits
        self.profile, self.tool_mode, self.model = self._resolve(settings.model)
        ws = Workspace.open(resume) if resume else Workspace.create(self.problem, settings.runs_dir)
        self.agent = self._new_agent(ws)
        if resume:
            self._resume_conversation()

    # --- setup ------------------------------------------------------------------------------
    @property
    def ws(self) -> Workspace:
        return self.agent.ws

    def runs_base(self) -> Path:
        return self.settings.runs_dir or self.problem.parent / ".kcoder" / "runs"

    def _resolve(self, model: str | None) -> tuple[Profile, str, str | None]:
        """(profile, tool mode, model) for `model`; ChatError for bad names or a missing key."""
        try:
            prof = resolve_profile(model or "", self.settings.profile, self.settings.tool_call)
        except ValueError as exc:
            raise ChatError(str(exc)) from exc
        if not model:
            return prof, "native", None
        problem = missing_key_message(model, self.settings.api_base)
        if problem:
            raise ChatError(problem)
        return prof, concrete_tool_call_mode(prof, model), model

    def _llm(self) -> LLM:
        prof = self.profile
        return LLM(model=self.model or "", api_base=self.settings.api_base, tool_mode=self.tool_mode,
                   temperature=prof.temperature, max_output_tokens=prof.max_output_tokens,
                   stream=self.settings.stream, on_text=self.io.assistant_text,
                   on_notice=self.io.warn)

    def _new_agent(self, ws: Workspace) -> Agent:
        ctx = ToolContext(workspace=ws, options=self.options, skills=SkillCatalog.discover(),
                          evaluate=self.evaluate, extra={"profile": self.profile_kernels})
        limits = Limits(target=self.settings.target, max_cost=self.settings.max_cost)
        budget = max(8_000, self.profile.context_window - self.profile.max_output_tokens - 2_000)
        return Agent(self._llm(), Toolbox(self.profile.tools), ctx, limits, context_budget=budget,
                     on_event=self._event)

    def _meta(self) -> dict[str, Any]:
        return {"mode": "chat", "model": self.model, "profile": self.profile.name,
                "tool_mode": self.tool_mode, "device": self.options.device,
                "target": self.settings.target, "api_base": self.settings.api_base,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def system_prompt(self) -> str:
        return _system_prompt(self.agent, self.profile, self.options, self.settings.target,
                              self.tool_mode) + "\n\n" + CHAT_NOTE

    def set_model(self, model: str) -> None:
        """Switch models; the conversation, best candidate and usage so far are kept."""
        self.profile, self.tool_mode, self.model = self._resolve(model)
        self.agent.set_llm(self._llm())
        self.agent.toolbox = Toolbox(self.profile.tools)
        if self.agent.messages:  # the tool protocol may differ: the new model gets its own rules
            self.agent.messages[0] = {"role": "system", "content": self.system_prompt()}
        self.ws.append({"type": "model", **self._meta()})

    def open_run(self, run_dir: Path) -> None:
        """Continue an earlier run (chat or optimize) in `run_dir`."""
        self.agent = self._new_agent(Workspace.open(run_dir))
        self.accepted = None
        self._resume_conversation()

    def _resume_conversation(self) -> None:
        try:
            self.agent.resume(self._meta())
        except AgentStop:  # nothing was said in that run yet: the next message starts it
            self.agent.best = self.ws.best_verdict()
            if self.agent.best:
                self.agent.best_candidate = self.ws.best_dir / "model_new.py"

    def clear(self) -> None:
        """Forget the conversation (the next message starts a fresh one); files and best stay."""
        self.agent.messages = []
        self.ws.append({"type": "clear"})

    # --- one user message -------------------------------------------------------------------
    def send(self, text: str) -> str:
        """Run one turn for the user's message; returns how it ended (a status word)."""
        if not self.model:
            raise ChatError(NO_MODEL)
        agent = self.agent
        text = "\n\n".join([*self.pending_notes, text])
        self.pending_notes = []
        if not agent.messages:
            agent.start(self.system_prompt(), chat_task(self.ws.reference_source(),
                                                        self.options.device) + text, self._meta())
        else:
            agent.add({"role": "user", "content": text})
        agent.limits.max_turns = agent.turns + self.settings.turns_per_message
        try:
            while True:
                agent.step()
        except FormatError:
            return "answered"  # a reply without a tool call: the model hands the turn back
        except AgentStop as stop:
            self._stopped(stop)
            return stop.status
        except KeyboardInterrupt:
            self.cancel()
            return "cancelled"
        finally:
            self.io.end_stream()

    def cancel(self) -> None:
        """Leave the history valid after Ctrl-C, and say what happened."""
        agent = self.agent
        answered = agent.answer_unanswered(CANCELLED)
        if not answered and agent.messages and agent.messages[-1].get("role") == "assistant" \
                and agent.llm.tool_mode == "text":  # text protocol: results are a user message
            agent.add({"role": "user", "content": prompts.observation_message("tool", CANCELLED)})
        self.ws.append({"type": "cancelled", "turn": agent.turns})
        self.io.warn("cancelled (Ctrl-C): the model stopped; any running evaluation was killed")

    def _stopped(self, stop: AgentStop) -> None:
        io = self.io
        if stop.status == "finished":
            io.note("the model ended its turn (finish)")
        elif stop.status == "target_reached":
            io.ok(f"target reached: {stop}")
        elif stop.status == "turn_limit":
            io.warn(f"stopped after {self.settings.turns_per_message} model turns on this message "
                    "(--max-turns); send 'continue' to let it go on")
        elif stop.status == "llm_error":
            io.error(str(stop))
        else:
            io.warn(f"stopped: {stop}")

    # --- evaluation -------------------------------------------------------------------------
    def evaluate(self, problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
        """The harness (or the injected evaluator) under a live status line."""
        evaluate = self._evaluator
        if evaluate is None:
            from kcoder.evaluate import evaluate  # lazy: imports torch
        with self.io.status(f"{_STAGES[options.stop_after]}: {Path(candidate).name}"):
            return evaluate(problem, candidate, options)

    def profile_kernels(self, problem: Path, candidate: Path, options: Any) -> Any:
        """kcoder.profile.profiler.profile_candidate (or the injected profiler) under a live
        status line; used by /profile and by the agent's profile tool."""
        profiler = self._profiler
        if profiler is None:
            from kcoder.profile.profiler import profile_candidate as profiler
        with self.io.status(f"profiling (Nsight Compute): {Path(candidate).name}"):
            return profiler(problem, candidate, options)

    def judge(self, path: Path, stop_after: str, source: str) -> tuple[Verdict, bool]:
        """Evaluate `path` (snapshotted first) up to `stop_after`; record the verdict like the
        agent's own. Returns (verdict, whether it became the best verified candidate)."""
        snapshot = self.ws.snapshot(path)
        verdict = self.evaluate(self.ws.reference, snapshot, replace(self.options, stop_after=stop_after))
        obs = Observation(format_verdict(verdict, stop_after), ok=stage_passed(verdict, stop_after),
                          verdict=verdict, candidate=snapshot)
        before = self.agent.best
        self.agent.consider(source, obs)
        self.pending_notes.append(f"[The user ran {source} on {self.ws.relative(path)}; the "
                                  f"evaluator said:]\n{obs.text}")
        return verdict, self.agent.best is not before

    # --- reports ----------------------------------------------------------------------------
    def report(self, best: dict[str, Any] | None = None, best_path: Path | None = None) -> dict[str, Any]:
        """The session's report (report.json's shape); `best` overrides the best verdict."""
        agent = self.agent
        result = RunResult("chat", "interactive session", agent.turns, best or agent.best,
                           agent.target_reached, agent.usage(), time.monotonic() - self.started)
        report = build_report(self.ws, result, model=self.model or "", profile=self.profile.name,
                              device=self.options.device, target=self.settings.target)
        if best_path is not None:
            report["best_path"] = str(best_path)
        return report

    # --- rendering the agent's events -------------------------------------------------------
    def _files(self) -> dict[str, str]:
        """Text files the agent may change (the workspace minus kcoder's own records)."""
        out = {}
        for path in self.ws.root.rglob("*"):
            rel = path.relative_to(self.ws.root)
            if rel.parts[0] in PROTECTED or not path.is_file() or path.stat().st_size > _MAX_SHOWN:
                continue
            data = path.read_bytes()
            if b"\0" not in data:
                out[rel.as_posix()] = data.decode("utf-8", errors="replace")
        return out

    def _event(self, kind: str, data: dict[str, Any]) -> None:
        io = self.io
        if kind == "tool_call":
            self._before = self._files()
            io.print_text(f"→ {data['name']} {_short_args(data['arguments'])}", "cyan")
        elif kind == "observation":
            lines = data["text"].splitlines() or [""]
            if data.get("verdict"):
                lines = lines[:2] + [ln for ln in lines[2:] if ln.startswith("speed-up")]
            for line in lines[:4 if data.get("verdict") else 1]:
                io.print_text(f"  {line[:160]}", "green" if data["ok"] else "red")
            self._show_changes()
        elif kind == "best":
            sc = data["verdict"].get("speedup_vs_compile")
            io.print_text("  ★ new best verified candidate"
                          + (f" ({sc:.2f}x vs torch.compile)" if sc else ""), "bold green")
        elif kind == "notice":
            io.note(data["text"])

    def _show_changes(self) -> None:
        before, after = getattr(self, "_before", {}), self._files()
        for rel, text in after.items():
            if rel not in before:
                self.io.print(ui.code(text, rel, max_lines=60))
            else:
                shown = ui.diff(before[rel], text, f"a/{rel}", f"b/{rel}", max_lines=80)
                if shown is not None:
                    self.io.print(shown)


def _short_args(arguments: Any, keep: int = 60) -> str:
    """Tool arguments in one line: long strings (file contents) shown as their size."""
    try:
        args = json.loads(arguments, strict=False) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return str(arguments)[:keep]
    if not isinstance(args, dict):
        return str(args)[:keep]
    parts = []
    for key, value in args.items():
        if isinstance(value, str) and ("\n" in value or len(value) > keep):
            parts.append(f"{key}=<{len(value.splitlines())} lines>")
        else:
            parts.append(f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}")
    return " ".join(parts)
