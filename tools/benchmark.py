"""Tool: run the evaluator on the candidate up to the 'timing' stage."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext, evaluate_candidate

NAME = "benchmark"
DESCRIPTION = (
    "Build, verify and time the candidate against eager PyTorch and torch.compile in one "
    "process. Reports medians, speed-ups and reward. This verdict decides whether the target "
    "is reached."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "candidate file, default model_new.py"},
    },
}


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    return evaluate_candidate(args, ctx, "timing")
