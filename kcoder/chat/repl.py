"""`kcoder chat`: the read-eval-print loop over a ChatSession and its slash commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prompt_toolkit.completion import Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from kcoder.chat.commands import Commands, QuitChat
from kcoder.chat.io import InputOutput
from kcoder.chat.session import BUILTIN_NOTE, ChatError, ChatSession
from kcoder.problem import ProblemError
from kcoder.settings import BUILTIN, Settings
from kcoder.shutdown import Terminated
from kcoder.workspace import WorkspaceError


class ChatCompleter(Completer):
    """Tab completion: command names after "/", each command's arguments (its
    `completions_<name>` plus file paths where it takes a file), paths in free text."""

    def __init__(self, commands: Commands) -> None:
        self.commands = commands
        self._paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event: Any) -> Iterator[Completion]:
        text = document.text_before_cursor
        if text.startswith("/") and "\n" not in text:
            word, space, arg = text[1:].partition(" ")
            if not space:
                for name in self.commands.names():
                    if name.startswith(word.lower()):
                        summary = (getattr(self.commands, f"cmd_{name}").__doc__ or "").splitlines()[0]
                        yield Completion(f"/{name}", start_position=-len(text), display_meta=summary)
                return
            names = self.commands.matching(word.lower())
            if len(names) != 1:
                return
            arg = arg.lstrip()
            for choice in self.commands.completions(names[0], arg):
                yield Completion(choice, start_position=-len(arg))
            if names[0] in self.commands.path_args:
                yield from self._path_completions(arg, complete_event)
            return
        word = document.get_word_before_cursor(WORD=True)
        if word and ("/" in word or word.startswith((".", "~"))):
            yield from self._path_completions(word, complete_event)

    def _path_completions(self, text: str, event: Any) -> Iterator[Completion]:
        # PathCompleter completes the last path component; its start_position is relative
        # to the cursor, so it applies unchanged to the full line.
        yield from self._paths.get_completions(Document(text, len(text)), event)


def is_command(text: str) -> bool:
    """A slash command, not a message that starts with an absolute path (/home/x/y.py ...)."""
    stripped = text.lstrip()
    return stripped.startswith("/") and "/" not in stripped.split(maxsplit=1)[0][1:]


def repl(session: ChatSession, commands: Commands, io: InputOutput) -> None:
    """Read and handle input until /quit, Ctrl-D or the end of stdin."""
    while True:
        try:
            text = io.prompt()
        except EOFError:
            return
        if not text.strip():
            continue
        try:
            if is_command(text):
                commands.run(text)
            else:
                session.send(text)
        except QuitChat:
            return
        except ChatError as exc:
            io.error(str(exc))
        except KeyboardInterrupt as exc:  # e.g. Ctrl-C during /bench: the worker is already killed
            if isinstance(exc, Terminated):
                raise
            io.warn("cancelled (Ctrl-C)")


def run_chat(problem: Path, settings: Settings, *, io: InputOutput | None = None,
             evaluator: Any = None, profiler: Any = None) -> int:
    """Start a chat session on `problem` (or continue the run in `settings.resume`); returns
    the exit code: 0 after a normal exit, 2 when the session cannot start (bad file, option or
    key). `evaluator` / `profiler` replace kcoder's judge and profiler (tests)."""
    io = io or InputOutput()
    try:
        settings.validate()
        session = ChatSession(problem, io, settings, evaluator=evaluator, profiler=profiler)
    except (ChatError, ProblemError, WorkspaceError, ValueError, OSError) as exc:
        io.error(str(exc))
        return 2
    commands = Commands(session, io)
    io.set_completer(ChatCompleter(commands))
    io.say(f"kcoder chat · {session.problem.name} on {settings.device} · run directory {session.ws.root}")
    if session.model == BUILTIN:
        io.note(f"model {BUILTIN}: {BUILTIN_NOTE} · /help lists the commands")
    elif session.model:
        io.note(f"model {session.model} ({session.profile_name}, {session.tool_mode} tool calls) · "
                "/help lists the commands")
    else:
        io.warn("no model given (--model): slash commands only until /model NAME · /help lists them")
    try:
        repl(session, commands, io)
    finally:
        session.ws.write_report(session.report())
        io.note(f"session saved in {session.ws.root}")
    return 0
