"""What a run shows while it happens: the agent loop's events rendered on a ui.Output.

One renderer for `kcoder optimize` and `kcoder chat`: tool calls with their arguments in one
line, the first lines of each observation (a verdict's outcome and speed-ups), a new best
candidate, notices. Chat also shows how each tool call changed the workspace's files.
"""

from __future__ import annotations

from typing import Any

from kcoder import ui
from kcoder.agent.llm import shorten_arguments
from kcoder.workspace import PROTECTED, Workspace

_MAX_SHOWN = 256_000  # bytes: larger workspace files are not diffed after tool calls


class _Elided:
    """A long argument shown by its size; repr() is what is printed."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<{len(self.text.splitlines())} lines>"


def short_arguments(arguments: Any, keep: int = 60) -> str:
    """Tool arguments in one line: long strings (file contents) shown as their size."""
    args = shorten_arguments(arguments, keep, lambda v: _Elided(v) if "\n" in v or len(v) > keep else v)
    if isinstance(args, str):
        return args
    return " ".join(f"{k}={v!r}" if isinstance(v, (str, _Elided)) else f"{k}={v}" for k, v in args.items())


class RunView:
    """Renders an agent's events (see loop.EventHandler) on `out`. `turn_rules` marks each model
    turn; with `workspace`, every tool call's file changes are shown (new files as code, edits
    as diffs)."""

    def __init__(self, out: ui.Output, *, workspace: Workspace | None = None,
                 turn_rules: bool = False) -> None:
        self.out, self.workspace, self.turn_rules = out, workspace, turn_rules
        self._before: dict[str, str] = {}

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        out = self.out
        if kind == "turn":
            if self.turn_rules:
                out.print_text(f"\n── turn {data['turn']} ──", "dim")
        elif kind == "tool_call":
            self._before = self._files()
            out.print_text(f"→ {data['name']} {short_arguments(data['arguments'])}", "cyan")
        elif kind == "observation":
            self._observation(data)
            self._show_changes()
        elif kind == "best":
            sc = data["verdict"].speedup_vs_compile
            out.print_text("  ★ new best verified candidate"
                           + (f" ({sc:.2f}x vs torch.compile)" if sc else ""), "bold green")
        elif kind == "notice":
            out.note(data["text"])

    def _observation(self, data: dict[str, Any]) -> None:
        lines = data["text"].splitlines() or [""]
        if data.get("verdict"):  # outcome and reason, then the speed-ups if it was timed
            lines = (lines[:2] + [ln for ln in lines[2:] if ln.startswith("speed-up")])[:4]
        for line in lines[:4 if data.get("verdict") else 1]:
            self.out.print_text(f"  {line[:160]}", "green" if data["ok"] else "red")

    def _files(self) -> dict[str, str]:
        """Text files the agent may change (the workspace minus kcoder's own records)."""
        if self.workspace is None:
            return {}
        out = {}
        root = self.workspace.root
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if rel.parts[0] in PROTECTED or not path.is_file() or path.stat().st_size > _MAX_SHOWN:
                continue
            data = path.read_bytes()
            if b"\0" not in data:
                out[rel.as_posix()] = data.decode("utf-8", errors="replace")
        return out

    def _show_changes(self) -> None:
        if self.workspace is None:
            return
        for rel, text in self._files().items():
            if rel not in self._before:
                self.out.print(ui.code(text, rel, max_lines=60))
                continue
            shown = ui.diff(self._before[rel], text, f"a/{rel}", f"b/{rel}", max_lines=80)
            if shown is not None:
                self.out.print(shown)

