"""The agent's `tune` tool: tune a workspace file, keep its best CONFIG, benchmark it.

The model declares or narrows the space in its own file and reads back the compact table;
deciding where to search next from those measurements is its job. The best point's CONFIG is
written into the file it tuned (only that literal changes) and the file is then benchmarked
by the usual evaluator tool path, so the run's best-candidate bookkeeping and its final
plain-build check see it like any other candidate.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext, ToolError, judge_file
from kcoder.choices import TUNE_STRATEGIES, check_choice
from kcoder.tune.engine import TuneOptions, tune
from kcoder.tune.report import importance, markdown_table, summary_lines, write_outputs
from kcoder.tune.space import SpaceError, load_space
from kcoder.workspace import CANDIDATE

DEFAULT_TRIALS = 24
DEFAULT_TIME_S = 900.0
TABLE_ROWS = 12
PROFILED_POINTS = 2  # ncu replays each kernel many times: the two fastest points say enough per call


def tune_in_workspace(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    """Run the tune tool's call `args` in `ctx`'s workspace."""
    target = ctx.workspace.resolve(args.get("path") or CANDIDATE, write=True)
    if not target.is_file():
        raise ToolError(f"{ctx.workspace.relative(target)} does not exist; write it first")
    try:
        space = load_space(target)
    except SpaceError as exc:
        raise ToolError(str(exc).replace(str(target), ctx.workspace.relative(target))) from None
    trials = args.get("trials") or DEFAULT_TRIALS
    if trials < 1:
        raise ToolError("trials must be at least 1")
    topts = TuneOptions(strategy=args.get("strategy") or "auto", trials=trials,
                        time_s=float(args.get("time_s") or DEFAULT_TIME_S), plain_check=False,
                        profile_top=PROFILED_POINTS)
    try:
        check_choice("strategy", topts.strategy, TUNE_STRATEGIES)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    folder = _folder(ctx, target)
    # a point needs a stable median, not the confidence of a final claim: a shorter timing budget
    options = replace(ctx.options, timing_budget_s=min(ctx.options.timing_budget_s, 1.0))
    result = tune(ctx.workspace.reference, target, options, topts, folder,
                  evaluator=ctx.evaluator())
    write_outputs(result, folder)
    lines = summary_lines(result) + [markdown_table(result, limit=TABLE_ROWS)]
    imp = importance(result)
    if imp:
        lines.append("parameter importance: " + ", ".join(f"{k} {v:.2f}" for k, v in imp.items()))
    lines.append(f"(table.md, table.json and tune.png in {ctx.workspace.relative(folder)})")
    if result.best_source is None:
        return Observation("\n".join(lines + ["CONFIG left unchanged."]), ok=False)
    if target.read_text() != space.source:
        return Observation("\n".join(lines + ["the file changed while tuning; CONFIG left unchanged"]), ok=False)
    target.write_text(result.best_source)
    lines.append(f"wrote the best CONFIG into {ctx.workspace.relative(target)}; its benchmark:")
    judged = judge_file(ctx, target, "timing")
    judged.text = "\n".join(lines) + "\n" + judged.text
    return judged


def _folder(ctx: ToolContext, target: Path) -> Path:
    base = ctx.workspace.root / "tune"
    n = 1
    while (base / f"{target.stem}-{n:03d}").exists():
        n += 1
    return base / f"{target.stem}-{n:03d}"
