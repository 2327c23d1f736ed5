"""The built-in policy as the agent's model: the ordinary agent loop runs its steps as tool
calls, so a policy run has the same run directory, trajectory, verdicts, best candidate,
report, --resume, --commit and chat /accept as an LLM run.

Steps: capture and plan the module, write model_new.py from the templates -> verify ->
tune its TUNE space (the tune tool writes the best CONFIG back and benchmarks it) -> finish.
A module with ops the policy cannot lower ends at the first step, naming them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcoder.replies import Reply, ToolCall, Usage
from kcoder.settings import BUILTIN, Settings
from kcoder.workspace import CANDIDATE, Workspace

DEFAULT_TRIALS = 6


@dataclass
class Generated:
    """What the policy made of a problem: the candidate's text, or why there is none."""

    source: str | None
    kernels: list[str] = field(default_factory=list)
    unsupported: dict[str, int] = field(default_factory=dict)
    error: str = ""
    rewrites: list[str] = field(default_factory=list)  # rewrite.py's rules applied, "rule@node"

    def summary(self) -> str:
        if self.source is not None:
            return f"{len(self.kernels)} kernel(s): " + "; ".join(self.kernels)
        return self.error


def generate(problem: Path, settings: Settings, work: Path) -> Generated:
    """Capture, plan and render `problem` for settings.device (settings.allow: library calls)."""
    from kcoder.policy.capture import CaptureError, capture_graph
    from kcoder.policy.graph import load_graph
    from kcoder.policy.plan import Unsupported, plan_graph
    from kcoder.policy.program import render_program
    from kcoder.policy.rewrite import rewrite

    try:
        data = capture_graph(problem, work, sandbox=settings.sandbox)
        graph = load_graph(data)
        applied = rewrite(graph, settings.allow)  # identities that hold for every input and weight (rewrite.py)
        plan = plan_graph(graph, settings.allow)
        source = any_batch(data, settings, problem.name) or render_program(plan, graph, settings.device, problem.name)
    except CaptureError as exc:
        return Generated(None, error=str(exc))
    except Unsupported as exc:
        return Generated(None, unsupported=dict(Counter(exc.census)), error=str(exc))
    except Exception as exc:  # noqa: BLE001  a policy bug must end the run with a reason, not a traceback
        return Generated(None, error=f"kcoder's built-in policy failed on this module (a kcoder bug): "
                                     f"{type(exc).__name__}: {exc}")
    return Generated(source, [f"{k.name}: {k.describe()}" for k in plan.kernels], rewrites=applied)


def any_batch(data: dict[str, Any], settings: Settings, name: str) -> str | None:
    """The candidate written for any batch size (batchdims.py), or None when its text would
    differ from one traced batch size to another (it is then made for the problem's shapes)."""
    from kcoder.policy.batchdims import annotate
    from kcoder.policy.cuda_batch import generalize
    from kcoder.policy.emit_cuda import units
    from kcoder.policy.graph import load_graph
    from kcoder.policy.plan import Unsupported, plan_graph
    from kcoder.policy.program import render_program
    from kcoder.policy.rewrite import rewrite

    batches = data.get("batches")
    if not batches:
        return None
    graphs = [load_graph(data)] + [load_graph(g) for g in batches["graphs"]]
    for g in graphs:
        rewrite(g, settings.allow)
    if not annotate(graphs, batches["sizes"], scalars=True):
        return None
    try:
        plans = [plan_graph(g, settings.allow) for g in graphs]
        # every traced size rendered with the layouts chosen at the problem's own (cuda)
        fixed = ({u.k.name: u.choices() for u in units(plans[0], graphs[0])} if settings.device == "cuda" else None)
        texts = [render_program(p, g, settings.device, name, batches["scaled"][0], fixed)
                 for p, g in zip(plans, graphs, strict=True)]
    except (Unsupported, ValueError):
        return None
    code = [t.split('"""', 2)[2] for t in texts]  # the header describes each trace's own shapes
    if all(c == code[0] for c in code[1:]):
        return texts[0]
    # cuda: the sizes are literals; those that follow the batch become expressions of it
    generic = generalize(code, batches["sizes"]) if settings.device == "cuda" else None
    return None if generic is None else texts[0][:len(texts[0]) - len(code[0])] + generic


def read_notes(ws: Workspace) -> dict[str, Any]:
    """The policy's notes in a run directory ({} when the policy did not run there)."""
    path = ws.root / "policy" / "notes.json"
    return json.loads(path.read_text()) if path.is_file() else {}


class PolicyModel:
    """The LLM interface (query, usage, tool_mode) answered by the policy's fixed steps."""

    tool_mode = "native"

    def __init__(self, workspace: Workspace, settings: Settings, on_text: Any = None) -> None:
        self.ws, self.settings, self.on_text = workspace, settings, on_text
        self.usage = Usage()
        self.generated: Generated | None = None
        self._id = f"{BUILTIN}-0"

    def notes(self) -> dict[str, Any]:
        """What the report says about the policy's work (kernels, unsupported ops)."""
        return read_notes(self.ws)

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        # Counted from the policy's own replies: in chat an LLM may have spoken before /model builtin.
        step = sum(1 for m in messages if m.get("role") == "assistant" and _by_policy(m))
        self.usage.calls += 1
        self._id = f"{BUILTIN}-{len(messages)}"  # unique in the conversation, whoever spoke before
        if step == 0:
            return self._write()
        if step == 1 and self.ws.candidate.is_file():
            return self._reply("Verify the generated kernels on fresh inputs.", "verify", {})
        if step == 2 and self.ws.best_verdict() is not None:
            trials = self.settings.tune_trials or DEFAULT_TRIALS
            return self._reply(f"Verified. Tune the declared space ({trials} points at most).", "tune",
                               {"trials": trials})
        done = "The policy's steps are done." if self.ws.best_verdict() else "No verified kernel."
        return self._reply(done, "finish", {"summary": done})

    def _write(self) -> Reply:
        work = self.ws.root / "policy"
        g = self.generated = generate(self.ws.reference, self.settings, work)
        work.mkdir(exist_ok=True)
        (work / "notes.json").write_text(json.dumps({"kernels": g.kernels, "unsupported": g.unsupported,
                                                      "error": g.error, "rewrites": g.rewrites}, indent=1))
        if g.source is None:
            return self._reply(f"kcoder's built-in policy cannot lower this module: {g.error}", "finish",
                               {"summary": g.error})
        return self._reply(f"Captured Model.forward and generated {g.summary()}.", "write_file",
                           {"path": CANDIDATE, "content": g.source})

    def _reply(self, text: str, tool: str, arguments: dict[str, Any]) -> Reply:
        if self.on_text:
            self.on_text(text + "\n")
        args = json.dumps(arguments)
        message = {"role": "assistant", "content": text, "tool_calls": [
            {"id": self._id, "type": "function", "function": {"name": tool, "arguments": args}}]}
        return Reply(text, [ToolCall(self._id, tool, args)], message)


def _by_policy(message: dict[str, Any]) -> bool:
    return any(str(c.get("id", "")).startswith(f"{BUILTIN}-") for c in message.get("tool_calls") or ())
