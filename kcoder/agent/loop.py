"""The agent loop (mini-swe-agent style): run() loops step(); exceptions carry control flow.

The history is one flat list of message dicts; every message, verdict and usage update is
appended to trajectory.jsonl as it happens, so a killed run loses at most the step in
flight. The evaluator's verdicts, not the model, decide success: the run stops when a
verified, timed candidate reaches the target speed-up over torch.compile (unless
keep_going), or at a limit, or when the model is stuck. `finish` only ends the run.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcoder.agent import prompts
from kcoder.agent.llm import LLM, LLMError, shorten_arguments
from kcoder.agent.toolbox import Observation, Toolbox, ToolContext, check_plain_build, judge_file
from kcoder.replies import Reply, ToolCall, Usage
from kcoder.settings import BUILTIN, DEFAULT_TARGET
from kcoder.verdict import Verdict

EventHandler = Callable[[str, dict[str, Any]], None]


class FormatError(Exception):
    """The reply could not be acted on; the message goes back to the model."""


class AgentStop(Exception):
    """The run ends. `status` is a short code; str() says why in one line."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Limits:
    """When the run stops. target: required speedup_vs_compile of a verified candidate."""

    target: float = DEFAULT_TARGET
    keep_going: bool = False
    max_turns: int = 200
    max_cost: float | None = None
    max_time: float | None = None  # seconds of this session
    stuck_after: int = 3  # identical failing actions in a row
    max_format_errors: int = 5  # replies without a usable tool call in a row


@dataclass
class RunResult:
    """How a run (or a chat session so far) ended, with its best verified candidate's verdict."""

    status: str
    message: str
    turns: int
    best: Verdict | None
    target_reached: bool
    usage: Usage
    seconds: float


def rank(v: Verdict) -> tuple[bool, float, float]:
    """Sort key of verified verdicts, best last: timed above untimed (its speed-ups are
    known and go into reports and commits), then by speed-up over torch.compile, then eager.
    A time under the physical floor counts as no time (evaluate/floor.py; such a verdict is
    also refused)."""
    if v.implausible:
        return (False, 0.0, 0.0)
    return (v.candidate_us is not None, v.speedup_vs_compile or 0.0, v.speedup_vs_eager or 0.0)


def _estimate_tokens(message: dict[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False)) // 4 + 4  # ~4 characters per token


def _is_observation(m: dict[str, Any]) -> bool:
    return m.get("role") == "tool" or (
        m.get("role") == "user" and str(m.get("content", "")).startswith(prompts.OBSERVATION_PREFIX))


def _trim_arguments(arguments: str, keep: int = 200) -> str:
    """Old tool-call arguments for the model: long strings (whole files) cut to their start."""
    short = shorten_arguments(arguments, keep, lambda v: v if len(v) <= keep + 50
                              else v[:keep] + f"…[trimmed {len(v) - keep} chars]")
    return short if isinstance(short, str) else json.dumps(short)


def fit_context(messages: list[dict[str, Any]], budget: int, keep_recent: int = 6) -> list[dict[str, Any]]:
    """A copy of `messages` that fits `budget` tokens (estimated): old tool outputs are
    shortened first, then old tool-call arguments (whole files) and assistant text. The system
    prompt, the task and the last `keep_recent` messages stay intact."""
    total = sum(_estimate_tokens(m) for m in messages)
    if total <= budget:
        return messages
    out = [dict(m) for m in messages]
    old = range(2, max(2, len(out) - keep_recent))
    passes: list[Callable[[dict[str, Any]], None]] = []

    def trim_observation(m: dict[str, Any]) -> None:
        content = str(m.get("content", ""))
        if _is_observation(m) and len(content) > 600:
            m["content"] = content[:400] + f"\n[trimmed: {len(content) - 400} characters of an old output]"

    def trim_assistant(m: dict[str, Any]) -> None:
        if m.get("role") != "assistant":
            return
        content = str(m.get("content") or "")
        if len(content) > 600:
            m["content"] = content[:400] + "\n[trimmed old reasoning]"
        if m.get("tool_calls"):
            m["tool_calls"] = [{**tc, "function": {**tc["function"], "arguments": _trim_arguments(
                tc["function"]["arguments"])}} for tc in m["tool_calls"]]

    passes += [trim_observation, trim_assistant]
    for trim in passes:
        for i in old:
            before = _estimate_tokens(out[i])
            trim(out[i])
            total -= before - _estimate_tokens(out[i])
            if total <= budget:
                return out
    return out  # still over: the server's context error ends the run with a clear message


class Agent:
    """One optimization run: a model, its tools, the workspace, and the limits.

    Made by kcoder.agent.assemble.build_agent. `system_prompt` opens a fresh conversation;
    `meta` (model, profile, tool mode, device, target ...) heads each session's start record.
    """

    def __init__(self, llm: LLM, toolbox: Toolbox, ctx: ToolContext, limits: Limits, *,
                 context_budget: int = 100_000, on_event: EventHandler | None = None,
                 system_prompt: str = "", meta: dict[str, Any] | None = None) -> None:
        self.llm, self.toolbox, self.ctx, self.limits = llm, toolbox, ctx, limits
        self.ws = ctx.workspace
        self.context_budget = context_budget
        self.on_event = on_event or (lambda kind, data: None)
        self.system_prompt, self.meta = system_prompt, meta or {}
        self.messages: list[dict[str, Any]] = []
        self.turns = 0
        self.best: Verdict | None = None
        self.best_candidate: Path | None = None
        self.target_reached = False
        self._fail_key: str | None = None
        self._fail_count = 0
        self._format_errors = 0
        self._started = time.monotonic()
        self._usage_base = Usage()  # usage of earlier sessions of a resumed run

    # --- history ----------------------------------------------------------------------------
    def add(self, message: dict[str, Any]) -> None:
        """Append a message to the history and, at once, to the trajectory."""
        self.messages.append(message)
        self.ws.append({"type": "message", "turn": self.turns, "message": message})

    def start(self, task: str) -> None:
        """Begin a fresh conversation: the system prompt, then `task` from the user."""
        self.ws.append({"type": "start", **self.meta})
        self.add({"role": "system", "content": self.system_prompt})
        self.add({"role": "user", "content": task})

    def resume(self) -> None:
        """Continue from the trajectory: messages, turns, usage and best candidate."""
        records = self.ws.read_trajectory()
        # A conversation begins at its last fresh start (chat's /clear starts a new one).
        fresh = [i for i, r in enumerate(records) if r.get("type") == "start" and not r.get("resumed")]
        records_since = records[fresh[-1]:] if fresh else records
        self.messages = [r["message"] for r in records_since if r.get("type") == "message"]
        if not self.messages:
            raise AgentStop("bad_resume", f"{self.ws.trajectory_path}: no messages to resume from")
        self.turns = sum(1 for m in self.messages if m.get("role") == "assistant")
        usage = [r for r in records if r.get("type") == "usage"]
        if usage:
            self._usage_base.add(usage[-1]["totals"])
        self.restore_best()
        self.ws.append({"type": "start", "resumed": True, **self.meta})
        self.answer_unanswered(prompts.NOT_RUN)  # killed mid-step: every call needs an answer
        self.add({"role": "user", "content": prompts.RESUMED})

    def answer_unanswered(self, text: str) -> int:
        """Answer the last assistant message's tool calls that have no result yet with `text`
        (after a kill or a Ctrl-C mid-step, so the history stays valid). Returns how many."""
        last = next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)
        answered = {m.get("tool_call_id") for m in self.messages if m.get("role") == "tool"}
        missing = [tc for tc in (last or {}).get("tool_calls") or [] if tc["id"] not in answered]
        for tc in missing:
            self.add({"role": "tool", "tool_call_id": tc["id"], "content": text})
        return len(missing)

    def restore_best(self) -> None:
        """Take the run directory's best verified candidate (after a resume) as this run's."""
        self.best = self.ws.best_verdict()
        if self.best:
            self.best_candidate = self.ws.best_dir / "model_new.py"
            reached = self.best.speedup_vs_compile
            self.target_reached = reached is not None and reached >= self.limits.target and not self.best.implausible

    def carry_over(self, previous: Agent) -> None:
        """Continue `previous`'s session (chat's model switch): conversation, turns, best
        candidate and usage; this agent's system prompt replaces the old one."""
        self.messages, self.turns = previous.messages, previous.turns
        self.best, self.best_candidate = previous.best, previous.best_candidate
        self.target_reached, self._started = previous.target_reached, previous._started
        self._usage_base.add(vars(previous.usage()))
        if self.messages:  # the tool protocol may differ: the new model gets its own rules
            self.messages[0] = {"role": "system", "content": self.system_prompt}

    # --- the loop -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        status, message = "error", "kcoder failed (see the traceback)"
        try:
            try:
                self._loop()
            except AgentStop as stop:
                status, message = stop.status, str(stop)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (shutdown.Terminated)
                status, message = "interrupted", str(exc) or "stopped by the user (Ctrl-C)"
            if status != "interrupted":
                self.time_best()
                self.check_plain_build()
        finally:
            self.ws.append({"type": "end", "status": status, "message": message,
                            "turns": self.turns})
        return RunResult(status, message, self.turns, self.best, self.target_reached,
                         self.usage(), time.monotonic() - self._started)

    def _loop(self) -> None:
        while True:
            try:
                self.step()
            except FormatError as exc:
                self.answer_format_error(exc)

    def answer_format_error(self, exc: FormatError) -> None:
        """Tell the model its reply had no usable tool call; AgentStop after too many in a row."""
        self._format_errors += 1
        if self._format_errors >= self.limits.max_format_errors:
            raise AgentStop("format_errors", f"{self._format_errors} replies in a row "
                            "without a usable tool call") from exc
        self.add({"role": "user", "content": str(exc)})

    def usage(self) -> Usage:
        """Tokens, calls and cost of the whole run (earlier sessions and models included)."""
        total = Usage()
        total.add(vars(self._usage_base))
        total.add(vars(self.llm.usage))
        return total

    def check_limits(self) -> None:
        """AgentStop when a turn, cost or time limit is reached."""
        lim = self.limits
        if self.turns >= lim.max_turns:
            raise AgentStop("turn_limit", f"turn limit reached ({lim.max_turns} turns)")
        if lim.max_cost is not None and self.usage().cost >= lim.max_cost:
            raise AgentStop("cost_limit", f"cost limit reached (${self.usage().cost:.2f} of "
                            f"${lim.max_cost:.2f})")
        if lim.max_time is not None and time.monotonic() - self._started >= lim.max_time:
            raise AgentStop("time_limit", f"time limit reached ({lim.max_time:.0f} s)")

    def step(self) -> None:
        """One turn: ask the model, then run its tool calls."""
        self.check_limits()
        reply = self.query()
        self.execute(reply)

    def query(self) -> Reply:
        """Ask the model (FormatError when the reply has no usable tool call)."""
        self.turns += 1
        self.on_event("turn", {"turn": self.turns})
        try:
            reply = self.llm.query(fit_context(self.messages, self.context_budget),
                                   self.toolbox.schemas())
        except LLMError as exc:
            raise AgentStop("llm_error", str(exc)) from exc
        self.add(reply.message)
        self.ws.append({"type": "usage", "totals": vars(self.usage())})
        if not reply.tool_calls:
            raise FormatError(prompts.NO_TOOL_CALL if self.llm.tool_mode == "native"
                              else prompts.TEXT_NO_TOOL_CALL)
        self._format_errors = 0
        return reply

    def execute(self, reply: Reply) -> None:
        """Run the reply's tool calls in order and answer each; a stop skips the rest."""
        native = bool(reply.message.get("tool_calls"))
        stop: AgentStop | None = None
        text_results = []
        for call in reply.tool_calls:
            if stop is None:
                self.on_event("tool_call", {"name": call.name, "arguments": call.arguments})
                obs = self.toolbox.call(call, self.ctx)
                best_before = self.best
                stop = self.observe(call, obs)
                self.on_event("observation", {"name": call.name, "ok": obs.ok, "text": obs.text,
                                              "verdict": obs.verdict})
                if self.best is not best_before:
                    self.on_event("best", {"verdict": self.best})
                text = obs.text
            else:
                text = prompts.NOT_RUN
            if native:
                self.add({"role": "tool", "tool_call_id": call.id, "content": text})
            else:
                text_results.append(prompts.observation_message(call.name or "?", text))
        if text_results:
            self.add({"role": "user", "content": "\n\n".join(text_results)})
        if stop is not None:
            raise stop

    # --- verdicts -----------------------------------------------------------------------------
    def observe(self, call: ToolCall, obs: Observation) -> AgentStop | None:
        """Account for one observation: best candidate, target, stuck detection, finish."""
        stop = None
        if obs.verdict is not None and obs.candidate is not None:
            stop = self.consider(call.name, obs)
        if obs.ok:
            self._fail_key, self._fail_count = None, 0
        else:
            digest = obs.verdict.reason if obs.verdict is not None else obs.text
            if obs.candidate is not None:
                digest += hashlib.sha256(obs.candidate.read_bytes()).hexdigest()
            key = hashlib.sha256(f"{call.name}\0{call.arguments}\0{digest}".encode()).hexdigest()
            self._fail_count = self._fail_count + 1 if key == self._fail_key else 1
            self._fail_key = key
            if self._fail_count >= self.limits.stuck_after:
                stop = stop or AgentStop("stuck", f"the same failing {call.name} call was repeated "
                                         f"{self._fail_count} times")
        if obs.finish and stop is None:
            by = "the built-in policy finished its steps" if self.meta.get("model") == BUILTIN else \
                "the model called finish"
            stop = AgentStop("finished", by)
        return stop

    def consider(self, tool: str, obs: Observation) -> AgentStop | None:
        """Record a verdict; keep the candidate if it is the best verified one; check target."""
        verdict, candidate = obs.verdict, obs.candidate
        self.ws.append({"type": "verdict", "tool": tool, "candidate": self.ws.relative(candidate),
                        "verdict": verdict.to_dict()})
        if not verdict.correct:
            return None
        if self.best is None or rank(verdict) > rank(self.best):
            self.best, self.best_candidate = verdict, self.ws.save_best(candidate, verdict)
        s = verdict.speedup_vs_compile
        if s is None or s < self.limits.target or verdict.implausible:
            return None
        self.target_reached = True
        if self.limits.keep_going:
            obs.text += (f"\nThe evaluator confirms {s:.2f}x over torch.compile (target "
                         f"{self.limits.target:.2f}x). --keep-going: continue improving.")
            return None
        obs.text += f"\nTarget reached: {s:.2f}x over torch.compile. The run ends."
        return AgentStop("target_reached", f"a verified candidate is {s:.2f}x faster than "
                         f"torch.compile (target {self.limits.target:.2f}x)")

    def time_best(self) -> None:
        """If the best candidate was verified but never timed, time it for the report."""
        if not self.best or self.best.candidate_us is not None or not self.best_candidate:
            return
        self.on_event("notice", {"text": "timing the best verified candidate for the report"})
        self.consider("final-timing", judge_file(self.ctx, self.best_candidate, "timing"))

    def check_plain_build(self) -> None:
        """Verify the best candidate again, built exactly as plain load_inline builds it: every
        turn's build took kcoder's faster path. A failure lands in the best verdict's
        plain_build (then it is not committed and the run exits 1)."""
        if not self.best or not self.best_candidate or not self.ctx.options.fast_build:
            return
        self.on_event("notice", {"text": "checking the best candidate with a plain load_inline build: every turn "
                                 "used kcoder's faster build, and what you take away must not depend on it"})
        self.best = check_plain_build(self.ctx, self.best_candidate, self.best)
        self.ws.save_best(self.best_candidate, self.best)
