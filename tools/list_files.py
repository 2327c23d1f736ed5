"""Tool: list the files of the run workspace."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import ToolContext, ToolError
from kcoder.workspace import PROTECTED

NAME = "list_files"
DESCRIPTION = "List files in the run workspace (or a folder of it), with sizes; read-only ones are marked."
PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "folder, default the workspace root"}},
}
_MAX_ENTRIES = 200


def run(args: dict[str, Any], ctx: ToolContext) -> str:
    folder = ctx.workspace.resolve(args.get("path") or ".")
    if not folder.is_dir():
        raise ToolError(f"{args.get('path')} is not a folder")
    rows = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(ctx.workspace.root)
        if not path.is_file() or any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
            continue
        mark = "  (read-only)" if rel.parts[0] in PROTECTED else ""
        rows.append(f"{rel}  {path.stat().st_size} B{mark}")
    extra = len(rows) - _MAX_ENTRIES
    shown = rows[:_MAX_ENTRIES] + ([f"... {extra} more"] if extra > 0 else [])
    return "\n".join(shown) or "(empty)"
