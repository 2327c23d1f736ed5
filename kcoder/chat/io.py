"""The one object that owns the chat's input (prompt_toolkit session) and output (rich console).

Interactive (stdin and stdout are terminals, or a prompt_toolkit input is given): a
PromptSession with persistent history, tab completion and multi-line editing (Enter sends,
Alt/Esc-Enter starts a new line; pasted text keeps its newlines). Otherwise lines are read
from stdin (scripts): a line ending in a backslash continues on the next one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kcoder import ui
from kcoder.paths import kcoder_home
from kcoder.shutdown import Terminated

if TYPE_CHECKING:
    from prompt_toolkit.completion import Completer

PROMPT = "kcoder> "


def history_path() -> Path:
    """Where the chat's input history is kept."""
    return kcoder_home() / "history"


class InputOutput(ui.Output):
    """Reads user input and prints everything the chat shows (printing: see ui.Output).

    `pt_input` / `pt_output`: prompt_toolkit input and output (tests pass a pipe input and a
    DummyOutput); `stdin`: the line source when not interactive; `console`: a rich Console
    (default: NO_COLOR-aware, see kcoder.ui.console).
    """

    def __init__(self, *, console: Any = None, pt_input: Any = None, pt_output: Any = None,
                 stdin: IO[str] | None = None, interactive: bool | None = None,
                 history: Path | None = None) -> None:
        super().__init__(console)
        self.stdin = stdin or sys.stdin
        if interactive is None:
            interactive = pt_input is not None or (self.stdin.isatty() and sys.stdout.isatty())
        self.interactive = interactive
        self._pt_input, self._pt_output = pt_input, pt_output
        self.history = history or history_path()
        self._session: Any = None
        self._completer: Completer | None = None

    # --- input ------------------------------------------------------------------------------
    def set_completer(self, completer: Completer) -> None:
        self._completer = completer

    def _prompt_session(self) -> Any:
        if self._session is None:
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import FileHistory, InMemoryHistory
            from prompt_toolkit.key_binding import KeyBindings

            bindings = KeyBindings()

            @bindings.add("escape", "enter")  # Alt-Enter arrives as Esc, Enter
            def _newline(event: Any) -> None:
                event.current_buffer.insert_text("\n")

            try:
                self.history.parent.mkdir(parents=True, exist_ok=True)
                history: Any = FileHistory(str(self.history))
            except OSError as exc:  # a read-only home must not stop the chat
                self.warn(f"history not saved ({self.history}: {exc.strerror})")
                history = InMemoryHistory()
            self._session = PromptSession(
                history=history, completer=self._completer, complete_while_typing=False,
                key_bindings=bindings, multiline=False, input=self._pt_input,
                output=self._pt_output, prompt_continuation=lambda width, *_: "." * (width - 1) + " ")
        return self._session

    def prompt(self) -> str:
        """The next user input. Ctrl-C at the prompt gives "" (the line is dropped); Ctrl-D or
        the end of stdin raises EOFError."""
        self.end_stream()
        if self.interactive:
            try:
                return self._prompt_session().prompt(PROMPT)
            except KeyboardInterrupt as exc:
                if isinstance(exc, Terminated):  # SIGTERM/SIGHUP end the chat
                    raise
                return ""
        return self._read_lines()

    def _read_lines(self) -> str:
        parts: list[str] = []
        while True:
            try:
                line = self.stdin.readline()
            except KeyboardInterrupt as exc:
                if isinstance(exc, Terminated):
                    raise
                return ""
            if not line:
                if parts:
                    break
                raise EOFError
            line = line.rstrip("\n").rstrip("\r")
            if line.endswith("\\"):
                parts.append(line[:-1])
                continue
            parts.append(line)
            break
        text = "\n".join(parts)
        if text.strip():  # echo, so a scripted transcript shows what was asked
            self.print_text(PROMPT + text.replace("\n", "\n" + " " * len(PROMPT)), "bold")
        return text
