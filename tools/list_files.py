"""Tool: list the files of the run workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kcoder.agent.toolbox import ToolContext, ToolError
from kcoder.workspace import PROTECTED, WorkspaceError

NAME = "list_files"
DESCRIPTION = "List files in the run workspace (or a folder of it), with sizes; read-only ones are marked."
PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "folder, default the workspace root"}},
}
_MAX_ENTRIES = 200


def _files(folder: Path, ctx: ToolContext) -> list[Path]:
    """Files under `folder` that read_file could open: the same confinement (workspace.resolve),
    so a symlink that leads outside the workspace is not listed, and its target's size not told.
    Linked folders are not entered (os.walk does not follow links)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        for name in filenames:
            path = Path(dirpath) / name
            if name.startswith("."):
                continue
            try:
                target = ctx.workspace.resolve(str(path))
            except WorkspaceError:
                continue
            if target.is_file():
                found.append(path)
    return sorted(found)


def run(args: dict[str, Any], ctx: ToolContext) -> str:
    folder = ctx.workspace.resolve(args.get("path") or ".")
    if not folder.is_dir():
        raise ToolError(f"{args.get('path')} is not a folder")
    rows = []
    for path in _files(folder, ctx):
        rel = path.relative_to(ctx.workspace.root)
        mark = "  (read-only)" if rel.parts[0] in PROTECTED else ""
        rows.append(f"{rel}  {ctx.workspace.resolve(str(path)).stat().st_size} B{mark}")
    extra = len(rows) - _MAX_ENTRIES
    shown = rows[:_MAX_ENTRIES] + ([f"... {extra} more"] if extra > 0 else [])
    return "\n".join(shown) or "(empty)"
