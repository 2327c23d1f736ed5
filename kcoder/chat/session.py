"""One chat session: the run directory, the agent, one user message at a time, and Ctrl-C.

A user message becomes one *turn*: the agent steps (model reply, tool calls) until the model
answers without a tool call (it hands control back), calls finish, reaches the target, or a
limit. Ctrl-C interrupts the turn wherever it is: a model request is dropped, a running
evaluation's worker process group is killed (the evaluator's `finally` does that), and the
unanswered tool calls are answered "cancelled" so the conversation stays valid.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kcoder.agent import prompts
from kcoder.agent.assemble import build_agent, resolve_model
from kcoder.agent.loop import Agent, AgentStop, FormatError, RunResult
from kcoder.agent.report import build_report
from kcoder.agent.toolbox import Evaluator, Profiler, judge_file
from kcoder.chat.accepted import Accepted
from kcoder.chat.io import InputOutput
from kcoder.settings import Settings
from kcoder.shutdown import Terminated
from kcoder.verdict import Verdict
from kcoder.workspace import Workspace

CANCELLED = ("Cancelled: the user pressed Ctrl-C before this call finished (a running "
             "evaluation was killed). Wait for the user's next request.")

NO_MODEL = ("no model, so only slash commands work: pick one with /model NAME (e.g. "
            "anthropic/claude-sonnet-4-5, hosted_vllm/<served-name> with --api-base, or builtin "
            "for kcoder's built-in policy)")

BUILTIN_NOTE = ("the built-in policy reads no requests: each message runs its next steps (write the "
                "kernel, verify, tune, finish); /model NAME switches to an LLM")


class ChatError(Exception):
    """Something the user asked for cannot be done; the message says why and what to do."""


class ChatSession:
    """The state the REPL and the slash commands act on. `evaluator` / `profiler` replace
    kcoder's judge and profiler (tests)."""

    def __init__(self, problem: Path, io: InputOutput, settings: Settings, *,
                 evaluator: Evaluator | None = None, profiler: Profiler | None = None) -> None:
        from kcoder.problem import load_problem

        self.io, self.settings, self.options = io, settings, settings.eval_options()
        self._evaluator, self._profiler = evaluator, profiler
        self.problem = Path(load_problem(problem).path).resolve()  # ProblemError names the file
        self.started = time.monotonic()
        self.pending_notes: list[str] = []  # user-side events the model hears with the next message
        self.accepted: Accepted | None = None  # what /commit commits
        _checked(settings)  # a bad name or a missing key: before a run directory exists
        resume = settings.resume
        ws = Workspace.open(resume) if resume else Workspace.create(self.problem, settings.runs_dir)
        self.agent = self._new_agent(ws, settings)
        if resume:
            self._resume_conversation()

    # --- setup ------------------------------------------------------------------------------
    @property
    def ws(self) -> Workspace:
        return self.agent.ws

    @property
    def model(self) -> str | None:
        return self.settings.model

    @property
    def profile_name(self) -> str:
        return self.agent.meta["profile"]

    @property
    def tool_mode(self) -> str:
        return self.agent.meta["tool_mode"]

    def runs_base(self) -> Path:
        """Where this problem's run directories are (for /resume)."""
        return self.settings.runs_base(self.problem)

    def _new_agent(self, ws: Workspace, settings: Settings) -> Agent:
        try:  # build_agent puts both under a live status line
            return build_agent(settings, ws, self.io, mode="chat", evaluate=self._evaluator,
                               profiler=self._profiler)
        except ValueError as exc:
            raise ChatError(str(exc)) from exc

    def set_model(self, model: str) -> None:
        """Switch models: a new agent continues the conversation, best candidate and usage."""
        settings = replace(self.settings, model=model)
        agent = self._new_agent(self.ws, settings)
        agent.carry_over(self.agent)
        self.agent, self.settings = agent, settings
        self.ws.append({"type": "model", **agent.meta})

    def open_run(self, run_dir: Path) -> None:
        """Continue an earlier run (chat or optimize) in `run_dir`."""
        self.agent = self._new_agent(Workspace.open(run_dir), self.settings)
        self.accepted = None
        self._resume_conversation()

    def _resume_conversation(self) -> None:
        try:
            self.agent.resume()
        except AgentStop:  # nothing was said in that run yet: the next message starts it
            self.agent.restore_best()

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
            agent.start(prompts.chat_task(self.ws.reference_source(), self.settings.device) + text)
        else:
            agent.add({"role": "user", "content": text})
        agent.limits.max_turns = agent.turns + self.settings.max_turns
        try:
            while True:
                agent.step()
        except FormatError:
            return "answered"  # a reply without a tool call: the model hands the turn back
        except AgentStop as stop:
            self._stopped(stop)
            return stop.status
        except KeyboardInterrupt as exc:
            self.cancel()
            if isinstance(exc, Terminated):  # SIGTERM/SIGHUP: the chat ends, not just the turn
                raise
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
            io.warn(f"stopped after {self.settings.max_turns} model turns on this message "
                    "(--max-turns); send 'continue' to let it go on")
        elif stop.status == "llm_error":
            io.error(str(stop))
        else:
            io.warn(f"stopped: {stop}")

    # --- evaluation -------------------------------------------------------------------------
    def profile_kernels(self, problem: Path, candidate: Path, options: Any) -> Any:
        """The profiler under a live status line (/profile; the agent's profile tool too)."""
        return self.agent.ctx.profiler()(problem, candidate, options)

    def judge(self, path: Path, stop_after: str, source: str) -> tuple[Verdict, bool]:
        """Evaluate `path` (snapshotted first) up to `stop_after`; record the verdict like the
        agent's own. Returns (verdict, whether it became the best verified candidate)."""
        obs = judge_file(self.agent.ctx, path, stop_after)
        before = self.agent.best
        self.agent.consider(source, obs)
        self.pending_notes.append(f"[The user ran {source} on {self.ws.relative(path)}; the "
                                  f"evaluator said:]\n{obs.text}")
        assert obs.verdict is not None  # judge_file always judges
        return obs.verdict, self.agent.best is not before

    # --- reports ----------------------------------------------------------------------------
    def report(self, best: Verdict | None = None, best_path: Path | None = None) -> dict[str, Any]:
        """The session's report (report.json's shape); `best` overrides the best verdict."""
        agent = self.agent
        result = RunResult("chat", "interactive session", agent.turns, best or agent.best,
                           agent.target_reached, agent.usage(), time.monotonic() - self.started)
        report = build_report(self.ws, result, model=self.model or "", profile=self.profile_name,
                              device=self.settings.device, target=self.settings.target)
        if best_path is not None:
            report["best_path"] = str(best_path)
        return report


def _checked(settings: Settings) -> None:
    try:
        resolve_model(settings)
    except ValueError as exc:
        raise ChatError(str(exc)) from exc
