"""`kcoder optimize`: a run directory, an agent (agent.assemble), the loop, the report.

Exit codes: 0 a verified candidate was produced (best/model_new.py), 1 none was, 2 bad
input or usage (no model, bad problem file, unknown option value, missing API key).
"""

from __future__ import annotations

from pathlib import Path

from kcoder import ui
from kcoder.agent import prompts
from kcoder.agent.assemble import build_agent, resolve_model
from kcoder.agent.loop import AgentStop
from kcoder.agent.preflight import roofline_preflight, stop_report
from kcoder.agent.report import build_report, commit_record, print_summary
from kcoder.agent.toolbox import Evaluator
from kcoder.problem import ProblemError, load_problem
from kcoder.settings import Settings
from kcoder.verdict import plain_build_ok
from kcoder.workspace import Workspace, WorkspaceError

NO_MODEL_MESSAGE = """\
kcoder optimize needs a model to write kernels, and none was given. There is no built-in
(no-LLM) policy yet, so kcoder will not pretend to optimize without one. Pass --model:
  kcoder optimize model.py --model anthropic/claude-sonnet-4-5        (set ANTHROPIC_API_KEY)
  kcoder optimize model.py --model openai/gpt-5                        (set OPENAI_API_KEY)
  kcoder optimize model.py --model hosted_vllm/<served-name> --api-base http://localhost:8000/v1
                                                  (a local vLLM/SGLang server; no key needed)
To judge a kernel you wrote yourself: kcoder eval model.py model_new.py"""


def optimize(problem: Path, settings: Settings, out: ui.Output, *,
             evaluator: Evaluator | None = None) -> int:
    """Run the agent on `problem` (or continue the run in `settings.resume`), print as it goes
    on `out`, write the report; with `settings.commit`, commit the best kernel. Returns the
    exit code. `evaluator` replaces kcoder.evaluate.evaluate (tests)."""
    if not settings.model:
        out.say(NO_MODEL_MESSAGE)
        return 2
    try:
        settings.validate()
        resolve_model(settings)  # a bad profile or a missing key: before a run directory exists
        ws = Workspace.open(settings.resume) if settings.resume else Workspace.create(
            Path(load_problem(problem).path), settings.runs_dir)  # ProblemError names the file
        pre = roofline_preflight(ws, settings, out)  # baselines + speed of light (agent/preflight.py)
        if pre.out_of_reach:
            return stop_report(ws, settings, out, pre, profile=resolve_model(settings)[0].name)
        agent = build_agent(settings, ws, out, evaluate=evaluator)
    except (ValueError, ProblemError, WorkspaceError, OSError) as exc:
        out.error(str(exc))
        return 2
    from rich.text import Text

    out.print(Text.assemble(("kcoder", "bold"), f" run directory: {ws.root}  ·  model {settings.model} "
                            f"({agent.meta['profile']}, {agent.meta['tool_mode']} tool calls)"))
    try:
        if settings.resume:
            agent.resume()
        else:
            agent.start(prompts.task_prompt(ws.reference_source(), settings.device))
    except AgentStop as exc:
        out.error(str(exc))
        return 2
    result = agent.run()
    report = build_report(ws, result, model=settings.model, profile=agent.meta["profile"],
                          device=settings.device, target=settings.target)
    ws.write_report(report)
    print_summary(out, report)
    code = 0 if result.best and plain_build_ok(result.best) else 1
    if settings.commit and code == 0 and result.status != "interrupted":  # stopped: commit nothing
        code = commit_best(ws, problem, settings.model, out)
    return code


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
