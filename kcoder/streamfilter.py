"""The model's streamed text without its tool-call blocks.

With the text tool-call protocol (agent/llm.py: the default for openai/* and hosted_vllm/*
models) the model writes each call as a fenced ```tool block or a <tool_call> element. That
is protocol, not prose: echoed, it shows a whole file as one escaped JSON line. The run view
prints one line per tool call instead, so these blocks are held back here as they stream in.
A ```json block is held until it ends and shown unless it is a tool call ({"name": ...}),
since a model may also show JSON in its prose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

_OPEN_FENCE = re.compile(r"^```(tool_call|tool|json)[ \t]*$")
_CLOSE_FENCE = re.compile(r"^```[ \t]*$")
_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _is_tool_json(body: str) -> bool:
    try:
        data = json.loads(body, strict=False)
    except ValueError:
        return False
    return isinstance(data, dict) and "name" in data


class ToolBlockFilter:
    """Passes streamed text to `sink`, minus tool-call blocks. Text is passed on at once,
    except the start of a line that could open a block (held until the line is complete)."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self.line = ""  # the current, unfinished line
        self.fence: str | None = None  # the kind of ``` block being held, if any
        self.held: list[str] = []  # the held block's lines
        self.in_hermes = False
        self.hidden = 0  # tool blocks held back so far (tests, the run view)

    def write(self, chunk: str) -> None:
        for piece in chunk.splitlines(keepends=True):
            self.line += piece
            if self.line.endswith("\n"):
                line, self.line = self.line, ""
                self._line(line)
        if self.line and self.fence is None and not self.in_hermes and not self._may_open(self.line):
            safe = self._safe_prefix(self.line)
            self._emit(safe)
            self.line = self.line[len(safe):]

    def close(self) -> None:
        """The reply is complete: pass on what is left (an unterminated block stays hidden
        unless it is a ```json block that is not a tool call)."""
        if self.line:
            line, self.line = self.line, ""
            self._line(line)
        if self.fence == "json" and not _is_tool_json("".join(self.held[1:])):
            self._emit("".join(self.held))
        self.fence, self.held, self.in_hermes = None, [], False

    def _may_open(self, partial: str) -> bool:
        text = partial.lstrip()
        return any(token.startswith(text) or text.startswith(token) for token in ("```", _HERMES_OPEN))

    @staticmethod
    def _safe_prefix(partial: str) -> str:
        """The part of an unfinished line before anything that could become a <tool_call>."""
        pos = partial.find("<")
        while pos != -1:
            tail = partial[pos:]
            if tail.startswith(_HERMES_OPEN) or _HERMES_OPEN.startswith(tail):
                return partial[:pos]
            pos = partial.find("<", pos + 1)
        return partial

    def _line(self, line: str) -> None:
        if self.in_hermes:
            self._hermes_rest(line)
        elif self.fence is not None:
            self._fenced(line)
        elif match := _OPEN_FENCE.match(line.strip()):
            self.fence, self.held = match.group(1), [line]
        elif _HERMES_OPEN in line:
            before, _, rest = line.partition(_HERMES_OPEN)
            self._emit(before)
            self.in_hermes, self.hidden = True, self.hidden + 1
            self._hermes_rest(rest)
        else:
            self._emit(line)

    def _fenced(self, line: str) -> None:
        if not _CLOSE_FENCE.match(line.strip()):
            self.held.append(line)
            return
        body = "".join(self.held[1:])
        if self.fence == "json" and not _is_tool_json(body):
            self._emit("".join(self.held) + line)
        else:
            self.hidden += 1
        self.fence, self.held = None, []

    def _hermes_rest(self, text: str) -> None:
        if _HERMES_CLOSE in text:
            self.in_hermes = False
            self._emit(text.partition(_HERMES_CLOSE)[2])

    def _emit(self, text: str) -> None:
        if text:
            self.sink(text)
