"""Tool: profile the candidate's CUDA kernels (Nsight Compute, roofline, ptxas resources)."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext, ToolError
from kcoder.workspace import CANDIDATE

NAME = "profile"
DESCRIPTION = (
    "Profile the candidate's CUDA kernels on the GPU with Nsight Compute: per kernel its time, SM and "
    "DRAM throughput, occupancy, registers, shared memory, top warp stalls, whether it is memory- or "
    "compute-bound and how close to the measured hardware limit, the compiler's register/spill report, "
    "and the profiler's advice. Slow (tens of seconds); does not judge correctness - use verify for that."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "candidate file, default model_new.py"},
        "full": {"type": "boolean", "description": "every stall reason and rule, more ncu sections (slower)"},
    },
}


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    target = ctx.workspace.resolve(args.get("path") or CANDIDATE)
    if not target.is_file():
        raise ToolError(f"{ctx.workspace.relative(target)} does not exist; write it first")
    if ctx.options.device != "cuda":
        return Observation("profile needs the cuda target (a CUDA GPU); this run targets "
                           f"{ctx.options.device}. Use benchmark for timings.", ok=False)
    from kcoder.problem import ProblemError
    from kcoder.profile.render import summary_text
    from kcoder.settings import Settings

    options = Settings.from_eval_options(ctx.options).profile_options(full=bool(args.get("full")))
    try:
        report = ctx.profiler()(ctx.workspace.reference, target, options)
    except (ProblemError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    text = summary_text(report, full=bool(args.get("full")))
    return Observation(text, ok=report.exit_code == 0 and report.mode in ("ncu", "timeline"))
