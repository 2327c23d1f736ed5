"""Tool: load the body of a SKILL.md workflow by name."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import ToolContext, ToolError

NAME = "load_skill"
DESCRIPTION = "Load a skill (a SKILL.md workflow listed in the system prompt) by name and return its instructions."
PARAMETERS = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "skill name, e.g. kernel-fusion"}},
    "required": ["name"],
}


def run(args: dict[str, Any], ctx: ToolContext) -> str:
    if ctx.skills is None:
        raise ToolError("no skills are available in this run")
    skill = ctx.skills.get(args["name"])
    if skill is None:
        raise ToolError(f"no valid skill named {args['name']!r}; available: "
                        + ", ".join(ctx.skills.names()))
    return f"# skill: {skill.name}\n\n{skill.body()}"
