"""Tool: search the candidate's declared TUNE space with the judge; the best CONFIG is kept."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext
from kcoder.choices import TUNE_STRATEGIES

NAME = "tune"
DESCRIPTION = (
    "Autotune the candidate's parameters. The file declares module-level literals TUNE (name -> "
    "list of values, e.g. {\"BLOCK\": [128, 256, 512], \"VEC\": [1, 2, 4]}), CONFIG (the current "
    "choice) and optionally TUNE_CONSTRAINTS (e.g. [\"BLOCK * VEC <= 2048\"]), and passes CONFIG "
    "to its kernels itself (-D flags, #define lines, template arguments). Every point is built, "
    "verified and timed by the judge; invalid points are listed with their reason. Returns a "
    "table fastest first, rewrites only the CONFIG literal of the file to the best verified "
    "point, and benchmarks it. Narrow or move TUNE from the table and call again; results are "
    "cached, so repeated points cost nothing."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "candidate file, default model_new.py"},
        "strategy": {"type": "string", "enum": list(TUNE_STRATEGIES),
                     "description": "auto (exhaustive when the space fits the trial budget, else tpe)"},
        "trials": {"type": "integer", "description": "points to judge at most (default 24)"},
        "time_s": {"type": "number", "description": "seconds at most (default 900)"},
    },
}


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    from kcoder.tune.tool import tune_in_workspace

    return tune_in_workspace(ctx, args)
