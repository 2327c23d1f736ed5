"""What a run shows while it happens: the agent loop's events rendered on a ui.Output.

One renderer for `kcoder optimize` and `kcoder chat`, for a person reading along: the model's
prose (streamed by the LLM, tool-call blocks left out), then one line per tool call (the tool,
its file, the size of what it writes or the diff stat of an edit), then, for the evaluator's
tools, the verdict's one-line result (printed under the live status, agent/status.py). A
failed tool call adds its error in one line. Whole files and diffs only with --verbose
(chat: /show and /diff on request).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from kcoder import ui
from kcoder.agent.llm import shorten_arguments
from kcoder.workspace import PROTECTED, Workspace, WorkspaceError

_MAX_SHOWN = 256_000  # bytes: larger workspace files are not diffed after tool calls
_ARG_CHARS = 60


class _Elided:
    """A long argument shown by its size; repr() is what is printed."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<{len(self.text.splitlines())} lines>"


def short_arguments(arguments: Any, keep: int = _ARG_CHARS) -> str:
    """Tool arguments in one line: long strings (file contents) shown as their size."""
    args = shorten_arguments(arguments, keep, lambda v: _Elided(v) if "\n" in v or len(v) > keep else v)
    if isinstance(args, str):
        return ui.clip(str(arguments), keep)
    return " ".join(f"{k}={v!r}" if isinstance(v, (str, _Elided)) else f"{k}={v}" for k, v in args.items())


def _size(text: str) -> str:
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    size = f"{len(text.encode()) / 1024:.1f} KB" if len(text) >= 1024 else f"{len(text.encode())} B"
    return f"{lines} line{'s' if lines != 1 else ''}, {size}"


def diff_stat(old: str, new: str) -> str:
    """"+A −R" lines added and removed from `old` to `new`."""
    added = removed = 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return f"+{added} −{removed}"


def describe_call(name: str, arguments: Any, workspace: Workspace | None) -> str:
    """One line for a tool call: the tool, its file, then what it writes (size, or the diff
    stat against the file as it is) or its other arguments, never a file's content."""
    try:
        args = json.loads(arguments, strict=False) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return f"{name} {short_arguments(arguments)}".rstrip()
    path = args.get("path") if isinstance(args.get("path"), str) else ""
    current = _current_text(workspace, path)
    if name == "write_file" and isinstance(args.get("content"), str):
        change = "new file" if current is None else diff_stat(current, args["content"])
        return f"{name} {path} ({change}, {_size(args['content'])})"
    if name == "edit_file" and isinstance(args.get("old_string"), str) and isinstance(args.get("new_string"), str):
        return f"{name} {path} ({diff_stat(args['old_string'], args['new_string'])})"
    rest = short_arguments({k: v for k, v in args.items() if k != "path"})
    return " ".join(part for part in (name, path, rest) if part)


def _current_text(workspace: Workspace | None, path: str) -> str | None:
    """The text of the workspace file `path` before a tool call changes it, if there is one."""
    if workspace is None or not path:
        return None
    try:
        target = workspace.resolve(path)
        return target.read_text(encoding="utf-8", errors="replace") if target.is_file() else None
    except (WorkspaceError, OSError):
        return None


class RunView:
    """Renders an agent's events (see loop.EventHandler) on `out`. `turn_rules` marks each model
    turn; `verbose` shows every tool call's file changes (new files as code, edits as diffs)."""

    def __init__(self, out: ui.Output, *, workspace: Workspace | None = None,
                 turn_rules: bool = False, verbose: bool = False) -> None:
        self.out, self.workspace, self.turn_rules, self.verbose = out, workspace, turn_rules, verbose
        self._before: dict[str, str] = {}

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        out = self.out
        if kind == "turn":
            if self.turn_rules:
                out.print_text(f"\n── turn {data['turn']} ──", "dim")
        elif kind == "tool_call":
            if self.verbose:
                self._before = self._files()
            line = describe_call(data["name"], data["arguments"], self.workspace)
            out.print_text(ui.clip(f"→ {line}", self._width()), "cyan", one_line=True)
        elif kind == "observation":
            self._observation(data)
            if self.verbose:
                self._show_changes()
        elif kind == "best":
            sc = data["verdict"].speedup_vs_compile
            out.print_text("  ★ new best verified candidate"
                           + (f" ({sc:.2f}x vs torch.compile)" if sc else ""), "bold green")
        elif kind == "notice":
            out.note(data["text"])

    def _width(self) -> int:
        console = self.out.console
        return console.width - 1 if console.is_terminal else 240

    def _observation(self, data: dict[str, Any]) -> None:
        """A verdict's line was printed under its status; other tools speak only to fail."""
        if data.get("verdict") is not None or data["ok"]:
            return
        first = next((ln for ln in data["text"].splitlines() if ln.strip()), "failed")
        self.out.print_text(ui.clip(f"  ✗ {first}", self._width()), "red", one_line=True)

    def _files(self) -> dict[str, str]:
        """Text files the agent may change (the workspace minus kcoder's own records)."""
        if self.workspace is None:
            return {}
        out = {}
        root = self.workspace.root
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if rel.parts[0] in PROTECTED or path.is_symlink() or not path.is_file() \
                    or path.stat().st_size > _MAX_SHOWN:
                continue
            data = path.read_bytes()
            if b"\0" not in data:
                out[rel.as_posix()] = data.decode("utf-8", errors="replace")
        return out

    def _show_changes(self) -> None:
        for rel, text in self._files().items():
            if rel not in self._before:
                self.out.print(ui.code(text, rel, max_lines=60))
                continue
            shown = ui.diff(self._before[rel], text, f"a/{rel}", f"b/{rel}", max_lines=80)
            if shown is not None:
                self.out.print(shown)
