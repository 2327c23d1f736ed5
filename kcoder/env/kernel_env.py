"""KernelEnv: `kcoder optimize` as a step API for training and evaluating policies.

The same run directory, tools, skills, evaluator and bookkeeping as `kcoder optimize` (it is
the same agent loop, agent.assemble.build_agent): the caller plays the model. `reset` opens a
fresh run directory and returns the task (the loop's first user message); `step` runs one
action (actions.py) through the loop and returns the tool results the model would read.

Gymnasium's conventions, without depending on it: reset(seed, options) -> (observation, info),
step(action) -> (observation, reward, terminated, truncated, info), close(). The reward is 0
until an evaluation, then the CUDA Agent reward of the best verified candidate so far (-1 while
every evaluated candidate failed; 1 correct, 2 >5% faster than eager, 3 faster than eager and
torch.compile). terminated: the policy called finish or reached the target; truncated: a
limit (turns, time, cost), the same failing call repeated, or too many replies without a call.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kcoder import ui
from kcoder.agent.llm import Reply, Usage
from kcoder.agent.loop import Agent, AgentStop, FormatError, RunResult
from kcoder.env.actions import to_reply
from kcoder.problem import load_problem
from kcoder.settings import DEFAULT_TARGET, Settings
from kcoder.verdict import Verdict
from kcoder.workspace import Workspace

TERMINAL = ("finished", "target_reached")  # the episode's own end; any other stop is a truncation


class _Pushed:
    """The loop's model: it answers each query with the action the caller passed to step()."""

    def __init__(self, tool_mode: str) -> None:
        self.tool_mode = tool_mode
        self.usage = Usage()
        self.reply: Reply | None = None

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        reply, self.reply = self.reply, None
        assert reply is not None, "KernelEnv queries only inside step()"
        return reply


def quiet_output() -> ui.Output:
    """An Output that prints nowhere (a training loop has no reader)."""
    from rich.console import Console

    return ui.Output(Console(file=open(os.devnull, "w"), width=120))  # noqa: SIM115  closed with the process


class KernelEnv:
    """One problem as an environment. `problem`: a KernelBench-style file. Further Settings
    fields (allow, precision, budget, no_compile, runs_dir, profile, eval_base, tune_trials,
    preflight ...) go in **settings. `tool_mode`: "native" (OpenAI tool calls) or "text"
    (fenced blocks; the system prompt then teaches that protocol). `evaluate` replaces
    kcoder's judge (tests). `final`: what an episode's end does, as optimize's run does:
    "timing" times a best candidate that was only verified (the last reward counts its speed),
    "plain_build" verifies it built as plain load_inline builds it (costs a build)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, problem: str | Path, device: str = "cuda", target: float = DEFAULT_TARGET,
                 max_turns: int = 50, sandbox: str = "auto", *, tool_mode: str = "native",
                 evaluate: Any = None, out: ui.Output | None = None, final: tuple[str, ...] = ("timing",),
                 label: str = "env", **settings: Any) -> None:
        self.problem = Path(load_problem(problem).path)  # ProblemError names the file
        settings.setdefault("preflight", False)
        try:
            self.settings = Settings(device=device, target=target, max_turns=max_turns,  # type: ignore[arg-type]
                                     sandbox=sandbox, **settings)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ValueError(f"KernelEnv: {exc}") from None
        self.settings.validate()
        if tool_mode not in ("native", "text"):
            raise ValueError(f"tool_mode must be native or text, not {tool_mode!r}")
        self.tool_mode, self.evaluate, self.label = tool_mode, evaluate, label
        unknown = set(final) - {"timing", "plain_build"}
        if unknown:
            raise ValueError(f"final: unknown end-of-episode step(s) {', '.join(sorted(unknown))}")
        self.final = final
        self.out = out or quiet_output()
        self.agent: Agent | None = None
        self.result: RunResult | None = None
        self._pushed = _Pushed(tool_mode)
        self._verdicts: list[Verdict] = []
        self._last: Verdict | None = None

    @classmethod
    def from_settings(cls, problem: str | Path, settings: Settings, **kw: Any) -> KernelEnv:
        """An environment whose settings are `settings` (a command's), plus KernelEnv's own `kw`."""
        from dataclasses import fields

        return cls(problem, **{f.name: getattr(settings, f.name) for f in fields(settings)}, **kw)

    # --- the episode ----------------------------------------------------------------------------
    @property
    def workspace(self) -> Workspace | None:
        return self.agent.ws if self.agent else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far in the OpenAI chat format (system prompt first)."""
        return self.agent.messages if self.agent else []

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools' OpenAI declarations (the names and arguments actions use)."""
        return self.agent.toolbox.schemas() if self.agent else []

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """A fresh run directory and conversation; returns (task text, info). `seed` is recorded
        in the trajectory (the policy's to use): the judge draws its own input seeds for every
        evaluation, which no policy may know, so verdicts are not replayed by a seed."""
        with _reaping():
            return self._reset(seed)

    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        from kcoder.agent import prompts
        from kcoder.agent.assemble import build_agent
        from kcoder.agent.preflight import roofline_preflight

        self.end("reset", "a new episode began before this one ended")
        self.result, self._last = None, None
        ws = Workspace.create(self.problem, self.settings.runs_dir)
        pre = roofline_preflight(ws, self.settings, self.out)  # only with preflight=True
        agent = build_agent(self.settings, ws, self.out, evaluate=self.evaluate, llm=self._pushed)
        agent.meta.update(model=self.label, seed=seed)
        shown = agent.on_event
        agent.on_event = lambda kind, data: (self._on_event(kind, data), shown(kind, data))
        self.agent = agent
        task = prompts.task_prompt(ws.reference_source(), self.settings.device)
        agent.start(task)
        info = {"system_prompt": agent.system_prompt, "tools": self.tools, "tool_names": agent.toolbox.names,
                "tool_mode": self.tool_mode, "run_dir": str(ws.root), "problem": str(self.problem),
                "seed": seed, "out_of_reach": pre.out_of_reach, "reference": pre.figures}
        return task, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one action; (observation, reward, terminated, truncated, info)."""
        with _reaping():
            return self._step(action)

    def _step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        agent = self.agent
        if agent is None or self.result is not None:
            raise RuntimeError("KernelEnv.step: call reset() first (the episode has ended or never began)")
        first = len(agent.messages) + 1  # what the step adds after the assistant message
        self._verdicts = []
        self._pushed.reply = to_reply(action, agent.turns + 1)
        stop: AgentStop | None = None
        try:
            try:
                agent.step()
            except FormatError as exc:
                agent.answer_format_error(exc)
            agent.check_limits()
        except AgentStop as exc:
            stop = exc
        observation = "\n\n".join(str(m.get("content") or "") for m in agent.messages[first:])
        if stop is not None:
            self.end(stop.status, str(stop))
        info = self.info()
        done = self.result is not None
        terminated = done and self.result.status in TERMINAL  # type: ignore[union-attr]
        return observation, float(self.reward()), terminated, done and not terminated, info

    def reward(self) -> int:
        """The best verified candidate's reward; else the last verdict's (-1, or 0 after an
        evaluation error that was kcoder's fault); 0 before any evaluation."""
        best = self.agent.best if self.agent else None
        if best is not None:
            return best.reward
        return self._last.reward if self._last is not None else 0

    def close(self) -> None:
        """End the episode (report written) and every process the environment started."""
        with _reaping():
            self.end("closed", "the environment was closed")

    def __enter__(self) -> KernelEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- bookkeeping ----------------------------------------------------------------------------
    def _on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "observation" and data.get("verdict") is not None:
            self._verdicts.append(data["verdict"])
            self._last = data["verdict"]

    def info(self) -> dict[str, Any]:
        """The last step's info: its verdicts, the best verdict, and the status once ended."""
        agent = self.agent
        assert agent is not None
        verdict = self._verdicts[-1] if self._verdicts else None
        info: dict[str, Any] = {"turn": agent.turns, "verdict": verdict.to_dict() if verdict else None,
                                "verdicts": [v.to_dict() for v in self._verdicts],
                                "best": agent.best.to_dict() if agent.best else None,
                                "run_dir": str(agent.ws.root)}
        if self.result is not None:
            info.update(status=self.result.status, message=self.result.message,
                        target_reached=self.result.target_reached)
        return info

    def end(self, status: str, message: str) -> None:
        """End the open episode as a run ends (final timing, trajectory, report) with `status`
        (e.g. the policy's model failed: "llm_error"); step() calls it at a stop."""
        agent = self.agent
        if agent is None or self.result is not None:
            return
        from kcoder.agent.report import build_report

        best = agent.best
        try:
            if "timing" in self.final and status not in ("closed", "reset"):
                agent.time_best()  # a verified best is timed: the final reward counts its speed
            if "plain_build" in self.final and status not in ("closed", "reset"):
                agent.check_plain_build()
        finally:
            if agent.best is not best and agent.best is not None:
                self._verdicts.append(agent.best)
            agent.ws.append({"type": "end", "status": status, "message": message, "turns": agent.turns})
            self.result = RunResult(status, message, agent.turns, agent.best, agent.target_reached,
                                    agent.usage(), 0.0)
        agent.ws.write_report(build_report(agent.ws, self.result, model=self.label,
                                           profile=str(agent.meta.get("profile")), device=self.settings.device,
                                           target=self.settings.target))


def _children() -> set[int]:
    """This process's live child processes (Linux /proc; empty elsewhere)."""
    me, found = os.getpid(), set()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else []:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(int(entry.name))
    return found


@contextmanager
def _reaping() -> Iterator[None]:
    """Around each call: SIGKILL the process group of every child started during it and still
    alive at its end (the evaluator ends its own at each verdict; this covers an interrupted
    call). Children the caller started itself are never touched."""
    known = _children()
    try:
        yield
    finally:
        _kill_new_children(known)


def _kill_new_children(known: set[int]) -> None:
    for pid in _children() - known:
        try:
            group = os.getpgid(pid)
            if group == os.getpgrp():  # a child in our own group: never signal the group (us)
                os.kill(pid, signal.SIGKILL)
            else:
                os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
