"""Drive `kcoder chat` in-process through prompt_toolkit's pipe input (real key presses)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.llm_server import ScriptedLLMServer
from helpers import fast_options


@dataclass
class ChatRun:
    code: int
    output: str
    run_dir: Path | None


def drive(problem: Path, keys: str, tmp_path: Path, *, server: ScriptedLLMServer | None = None,
          evaluator: Any = None, profiler: Any = None, resume: Path | None = None, options: Any = None,
          model: str | None = "openai/scripted", **fields: Any) -> ChatRun:
    """Run `kcoder chat` in-process with `keys` typed into prompt_toolkit (\\r = Enter);
    `fields` override Settings fields (verbose, tool_call ...)."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from kcoder.chat.io import InputOutput
    from kcoder.chat.repl import run_chat
    from kcoder.settings import Settings

    out = io.StringIO()
    settings = Settings.from_eval_options(
        options or fast_options(), model=model if server or model == "builtin" else None,
        api_base=server.base_url if server else None, **{"tool_call": "native", "max_turns": 30,
                                                         "runs_dir": tmp_path / "runs", "resume": resume, **fields})
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()  # what was sent is still read; then the prompt sees end of input (Ctrl-D)
        console = Console(file=out, width=400)  # wide: no line wrapping inside assertions
        chat_io = InputOutput(console=console, pt_input=pipe, pt_output=DummyOutput())
        code = run_chat(problem, settings, io=chat_io, evaluator=evaluator, profiler=profiler)
    runs = sorted((tmp_path / "runs").glob("*"), key=lambda p: p.stat().st_mtime)
    return ChatRun(code, out.getvalue(), resume or (runs[-1] if runs else None))


def enter(*lines: str) -> str:
    """Keys for typing each line and pressing Enter."""
    return "".join(line + "\r" for line in lines)
