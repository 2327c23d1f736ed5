"""`kcoder optimize`: a run directory, an agent (agent.assemble), the loop, the report.

Without a model, kcoder's built-in policy (kcoder.policy) drives the same loop. With
`--start builtin`, the policy runs first in the same run directory and the model starts from
its verified, tuned kernel.

Exit codes: 0 a verified candidate was produced (best/model_new.py), 1 none was, 2 bad
input or usage (bad problem file, unknown option value, missing API key).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kcoder import ui
from kcoder.agent import prompts
from kcoder.agent.assemble import build_agent, resolve_model
from kcoder.agent.loop import AgentStop
from kcoder.agent.preflight import roofline_preflight, stop_report
from kcoder.agent.report import build_report, commit_record, print_summary
from kcoder.agent.toolbox import Evaluator
from kcoder.problem import ProblemError, load_problem
from kcoder.settings import BUILTIN, Settings
from kcoder.verdict import Verdict, plain_build_ok
from kcoder.workspace import Workspace, WorkspaceError

BUILTIN_MESSAGE = ("no --model: running kcoder's built-in policy (kernels from templates, autotuned, "
                   "no LLM); for an LLM agent pass --model, e.g. --model anthropic/claude-sonnet-4-5")
BUILTIN_START_NOTE = """

model_new.py already holds a verified, tuned kernel written by kcoder's built-in policy
(no LLM): {verdict}. Start from it: read it, then make it faster. best/model_new.py is that
kernel until you beat it."""


def optimize(problem: Path, settings: Settings, out: ui.Output, *,
             evaluator: Evaluator | None = None) -> int:
    """Run the agent on `problem` (or continue the run in `settings.resume`), print as it goes
    on `out`, write the report; with `settings.commit`, commit the best kernel. Returns the
    exit code. `evaluator` replaces kcoder.evaluate.evaluate (tests)."""
    if not settings.model:
        out.say(BUILTIN_MESSAGE)
    try:
        settings.validate()
        resolve_model(settings)  # a bad profile or a missing key: before a run directory exists
        ws = Workspace.open(settings.resume) if settings.resume else Workspace.create(
            Path(load_problem(problem).path), settings.runs_dir)  # ProblemError names the file
        if settings.sizes:  # a name forward lacks: said now, not after the run
            from kcoder.agent.sizes import forward_position, parse_sizes

            forward_position(ws.problem_path(), parse_sizes(settings.sizes).name)
        pre = roofline_preflight(ws, settings, out)  # baselines + speed of light (agent/preflight.py)
        if pre.out_of_reach:
            return stop_report(ws, settings, out, pre, profile=resolve_model(settings)[0].name)
        agent = build_agent(settings, ws, out, evaluate=evaluator)
    except (ValueError, ProblemError, WorkspaceError, OSError) as exc:
        out.error(str(exc))
        return 2
    from rich.text import Text

    model = agent.meta["model"]
    out.print(Text.assemble(("kcoder", "bold"), f" run directory: {ws.root}  ·  model {model} "
                            f"({agent.meta['profile']}, {agent.meta['tool_mode']} tool calls)"))
    try:
        if settings.resume:
            agent.resume()
        else:
            task = prompts.task_prompt(ws.reference_source(), settings.device)
            if settings.start == BUILTIN and not settings.policy_answers():
                task += start_from_builtin(ws, settings, out, evaluator)
            agent.start(task)
            agent.restore_best()  # the built-in policy's kernel, when it made one
    except AgentStop as exc:
        out.error(str(exc))
        return 2
    result = agent.run()
    report = build_report(ws, result, model=model, profile=agent.meta["profile"],
                          device=settings.device, target=settings.target)
    report.update(policy_notes(agent.llm, ws))
    if settings.sizes and result.best and result.status != "interrupted":
        report["sizes"] = judge_sizes(ws, settings, result.best, evaluator, out)
    ws.write_report(report)
    print_summary(out, report)
    code = 0 if result.best and plain_build_ok(result.best) else 1
    if settings.commit and code == 0 and result.status != "interrupted":  # stopped: commit nothing
        code = commit_best(ws, problem, model, out)
    return code


def judge_sizes(ws: Workspace, settings: Settings, best: Verdict, evaluator: Evaluator | None,
                out: ui.Output) -> dict[str, Any]:
    """--shapes NAME=SIZES: the best kernel judged again at each size (agent/sizes.py)."""
    from kcoder.agent.sizes import parse_sizes, speed_at_sizes
    from kcoder.evaluate import evaluate

    spec = parse_sizes(settings.sizes or "")
    rows = speed_at_sizes(ws.problem_path(), ws.best_dir / "model_new.py", spec, best, settings.eval_options(),
                          evaluator or evaluate, ws.root / "sizes", say=out.say)
    return {"name": spec.name, "spec": spec.text, "rows": rows}


def start_from_builtin(ws: Workspace, settings: Settings, out: ui.Output, evaluator: Evaluator | None) -> str:
    """Run the built-in policy in `ws` first; put its best kernel in model_new.py. Returns the
    note for the model's task ("" when the policy made no verified kernel)."""
    from dataclasses import replace

    out.say("--start builtin: the built-in policy writes the first kernel")
    policy = build_agent(replace(settings, model=None, start=None), ws, out, evaluate=evaluator)
    policy.start(prompts.task_prompt(ws.reference_source(), settings.device))
    result = policy.run()
    best = ws.best_verdict()
    if best is None or result.status == "interrupted":
        out.warn("the built-in policy made no verified kernel: the model starts from a blank page")
        return ""
    ws.candidate.write_bytes((ws.best_dir / "model_new.py").read_bytes())
    return BUILTIN_START_NOTE.format(verdict=best.reason)


def policy_notes(llm: object, ws: Workspace) -> dict[str, Any]:
    """The built-in policy's kernels and unsupported ops for the report (also when it ran
    first under --start builtin: its notes are in the run directory)."""
    from kcoder.policy.driver import read_notes

    notes = llm.notes() if hasattr(llm, "notes") else read_notes(ws)
    return {"policy": notes} if notes else {}


def commit_best(ws: Workspace, problem: Path, model: str, out: ui.Output) -> int:
    """Commit the run's best verified candidate to branch kcoder/<problem>; 0, or 2 on a git
    problem (the run directory keeps everything: nothing is lost)."""
    from kcoder.gitops import GitOpsError, commit_accepted

    best = ws.best_verdict()
    if best is None:
        out.error("no verified candidate to commit")
        return 2
    md = ws.root / "report.md"
    try:
        result = commit_accepted(problem, ws.best_dir / "model_new.py", commit_record(best, model, problem.stem),
                                 report_md=md.read_text() if md.exists() else None,
                                 verdict_correct=best.correct and plain_build_ok(best))
    except GitOpsError as exc:
        out.error(str(exc))
        return 2
    out.say(f"committed {result.commit[:10]} on branch {result.branch}")
    return 0
