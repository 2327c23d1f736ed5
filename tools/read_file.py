"""Tool: read a text file of the run workspace (the reference model.py included)."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import ToolContext, ToolError

NAME = "read_file"
DESCRIPTION = (
    "Read a text file in the run workspace, e.g. model.py (the reference, read-only) or "
    "model_new.py (your candidate). Optional offset/limit select lines (1-based offset)."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "file path relative to the workspace"},
        "offset": {"type": "integer", "description": "first line to show (1-based)"},
        "limit": {"type": "integer", "description": "how many lines to show"},
    },
    "required": ["path"],
}


def run(args: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.workspace.resolve(args["path"])
    if not path.is_file():
        raise ToolError(f"{args['path']} does not exist (list_files shows what is there)")
    lines = path.read_text(encoding="utf-8").splitlines()
    start = max(1, int(args.get("offset") or 1))
    limit = args.get("limit")
    end = len(lines) if not limit else min(len(lines), start - 1 + max(1, int(limit)))
    shown = "\n".join(lines[start - 1:end])
    rel = ctx.workspace.relative(path)
    return f"{rel} (lines {start}-{end} of {len(lines)}):\n{shown}"
