"""Tool: run the evaluator on the candidate up to the 'build' stage."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext, evaluate_candidate

NAME = "compile"
DESCRIPTION = (
    "Build the candidate's extension (load_inline) in a fresh process and report compiler "
    "errors. Fast way to check that it compiles."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "candidate file, default model_new.py"},
    },
}


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    return evaluate_candidate(args, ctx, "build")
