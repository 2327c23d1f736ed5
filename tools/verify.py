"""Tool: run the evaluator on the candidate up to the 'verify' stage."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext, evaluate_candidate

NAME = "verify"
DESCRIPTION = (
    "Build and verify the candidate against the reference on several fresh input sets "
    "(correctness, no torch fallbacks). Reports the first mismatch."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "candidate file, default model_new.py"},
    },
}


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    return evaluate_candidate(args, ctx, "verify")
