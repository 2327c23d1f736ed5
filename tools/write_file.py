"""Tool: create or overwrite a file in the run workspace (never the reference)."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import ToolContext

NAME = "write_file"
DESCRIPTION = (
    "Create or overwrite a text file in the run workspace. The candidate the evaluator "
    "judges is model_new.py: one self-contained Python file defining class ModelNew that "
    "builds its kernels with torch.utils.cpp_extension.load_inline. model.py is read-only."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "file path relative to the workspace"},
        "content": {"type": "string", "description": "the complete new file content"},
    },
    "required": ["path", "content"],
}


def run(args: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.workspace.resolve(args["path"], write=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    content = args["content"]
    path.write_text(content, encoding="utf-8")
    n_lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"wrote {ctx.workspace.relative(path)} ({len(content)} characters, {n_lines} lines)"
