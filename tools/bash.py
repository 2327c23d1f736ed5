"""Tool: a restricted `bash` for models trained in the CUDA Agent environment.

That environment ran `bash utils/compile.sh`, `python3 -m utils.verification` and
`python3 -m utils.profiling` in a shell. kcoder has no shell for the model: this tool
recognises those commands (and `cat FILE`, `ls [DIR]`) and runs kcoder's evaluator or file
tools instead; anything else is refused with the list of what works.
"""

from __future__ import annotations

import shlex
from typing import Any

from kcoder.agent.toolbox import Observation, ToolContext, ToolError, evaluate_candidate

NAME = "bash"
DESCRIPTION = (
    "Run a command in the workspace. Only these are available: `bash utils/compile.sh` "
    "(build model_new.py), `python3 -m utils.verification` (check correctness), "
    "`python3 -m utils.profiling` (time against eager and torch.compile), `cat FILE`, `ls [DIR]`."
)
PARAMETERS = {
    "type": "object",
    "properties": {"command": {"type": "string", "description": "the command to run"}},
    "required": ["command"],
}
_STAGES = (("compile", "build"), ("verification", "verify"), ("profiling", "timing"))


def run(args: dict[str, Any], ctx: ToolContext) -> str | Observation:
    command = args["command"].strip()
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ToolError(f"cannot parse the command ({exc})") from exc
    if not words:
        raise ToolError("empty command")
    joined = " ".join(words)
    for key, stage in _STAGES:
        if f"utils/{key}" in joined or f"utils.{key}" in joined:
            return evaluate_candidate({}, ctx, stage)
    if words[0] == "cat" and len(words) == 2:
        path = ctx.workspace.resolve(words[1])
        if not path.is_file():
            raise ToolError(f"cat: {words[1]}: no such file")
        return path.read_text(encoding="utf-8")
    if words[0] == "ls" and len(words) <= 2:
        folder = ctx.workspace.resolve(words[1] if len(words) == 2 else ".")
        if not folder.is_dir():
            raise ToolError(f"ls: {words[1]}: no such folder")
        return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()))
    raise ToolError(f"`{command}` is not available here. " + DESCRIPTION.split(". ", 1)[1])
