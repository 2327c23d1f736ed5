"""Tool: exact search/replace in one file; the search text must match exactly once."""

from __future__ import annotations

from typing import Any

from kcoder.agent.toolbox import ToolContext, ToolError

NAME = "edit_file"
DESCRIPTION = (
    "Replace one exact occurrence of old_string with new_string in a workspace file. "
    "old_string must match the file text exactly (whitespace included) and exactly once; "
    "include surrounding lines to make it unique."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "file path relative to the workspace"},
        "old_string": {"type": "string", "description": "exact text to replace"},
        "new_string": {"type": "string", "description": "replacement text"},
    },
    "required": ["path", "old_string", "new_string"],
}


def run(args: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.workspace.resolve(args["path"], write=True)
    if not path.is_file():
        raise ToolError(f"{args['path']} does not exist; create it with write_file")
    old, new = args["old_string"], args["new_string"]
    if not old:
        raise ToolError("old_string is empty; use write_file to write a whole file")
    text = path.read_text(encoding="utf-8")
    count = text.count(old)
    if count == 0:
        hint = " (it matches if whitespace is ignored: check indentation)" if (
            " ".join(old.split()) in " ".join(text.split())) else ""
        raise ToolError(f"old_string not found in {args['path']}{hint}; read_file shows the text")
    if count > 1:
        raise ToolError(f"old_string matches {count} times in {args['path']}; "
                        "include more surrounding text so it matches once")
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    line = text[: text.index(old)].count("\n") + 1
    return f"edited {ctx.workspace.relative(path)} at line {line}"
