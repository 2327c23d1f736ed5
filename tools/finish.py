"""Tool: end the run. It never declares success: the evaluator's verdicts already decided."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext

NAME = "finish"
DESCRIPTION = (
    "End the run when you cannot improve further. This does not mark success: the result is "
    "the best candidate the evaluator verified (run benchmark first)."
)
PARAMETERS = {
    "type": "object",
    "properties": {"summary": {"type": "string", "description": "what you tried and learned"}},
}


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    return Observation("Run ending at your request; the report uses the best verified candidate.",
                       finish=True)
