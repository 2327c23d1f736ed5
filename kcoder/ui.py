"""Terminal rendering: verdict tables, code, diffs, streamed Markdown, a live status line, and
the Output object that run and chat print through.

Everything goes through a rich Console made by `console()`, which respects NO_COLOR.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from kcoder.streamfilter import ToolBlockFilter
from kcoder.verdict import Verdict


def console(stderr: bool = False) -> Any:
    """A rich Console (NO_COLOR respected, no automatic highlighting)."""
    from rich.console import Console

    return Console(stderr=stderr, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)


_new_console = console  # for Output, whose `console` argument hides the function


def clip(text: str, limit: int) -> str:
    """`text` on one line of at most `limit` characters; a cut line ends with an ellipsis."""
    text = " ".join(text.split("\n")) if "\n" in text else text
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def verdict_line(v: Verdict, label: str, seconds: float, stop_after: str) -> tuple[str, bool]:
    """A verdict in one line (and whether it passed `stop_after`, the stage asked for), after a
    live status: "✓ model_new_0002.py: correct on 5 input sets · 14.2 s, cached build"."""
    from kcoder.evaluate.progress import build_note

    passed = v.compiled if stop_after in ("compile", "build") else v.correct
    if v.correct and v.candidate_us is not None:
        per_call = f"{v.candidate_us / 1000:,.2f} ms" if v.candidate_us >= 1000 else f"{v.candidate_us:,.1f} us"
        # no torch.compile figure (--no-compile) is unknown, not 0.00x
        vs_compile = "" if v.speedup_vs_compile is None else f", {v.speedup_vs_compile:.2f}x vs torch.compile"
        sol = f", {100 * v.candidate_sol_fraction:.0f}% of SOL" if v.candidate_sol_fraction is not None else ""
        what = f"{v.speedup_vs_eager or 0:.2f}x vs eager{vs_compile} ({per_call}{sol}, reward {v.reward})"
    elif v.correct:
        what = f"correct on {v.n_input_sets} input sets" if v.n_input_sets else v.reason
    elif passed:
        what = "compiled (host code only)" if stop_after == "compile" else "built"
    else:
        what = f"{'evaluation error' if v.status == 'error' else 'failed'} at {v.stage}: {v.reason}"
    note = build_note(v.notes)
    return f"{'✓' if passed else '✗'} {label}: {what} · {seconds:.1f} s" + (f", {note}" if note else ""), passed


def _us(value: float | None, spread: float | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:,.1f} us"
    return f"{text} (IQR {spread:,.1f})" if spread is not None else text


def _ratio(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f"  [90% CI {ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def sol_text(v: Verdict) -> str:
    """The speed of light in words: "12.3 us, memory-bound (67.1 MB, 0 FLOP; ceilings ...)"."""
    flops = "FLOPs not counted" if v.flops is None else f"{v.flops / 1e9:,.3g} GFLOP"
    return (f"{_us(v.sol_us)}, {v.sol_bound}-bound ({(v.min_bytes or 0) / 1e6:,.1f} MB moved at least, "
            f"{flops}; {v.sol_ceilings})")


def sol_shares(v: Verdict) -> str:
    """Each implementation's share of the speed of light: "eager 31%, compile 88%, candidate 92%"."""
    shares = [(name, value) for name, value in (("eager", v.eager_sol_fraction),
              ("compile", v.compile_sol_fraction), ("candidate", v.candidate_sol_fraction)) if value is not None]
    return ", ".join(f"{name} {100 * value:.0f}%" for name, value in shares) or "-"


def verdict_table(v: Verdict) -> Any:
    """A two-column table summarising a verdict."""
    from rich.table import Table

    ok = v.correct
    title = ("[green]ACCEPTED[/]" if ok and v.stage == "done" else
             "[green]CORRECT[/]" if ok else "[red]REJECTED[/]") + f"  reward {v.reward}"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    rows = [
        ("candidate", v.candidate), ("problem", v.problem),
        ("device", f"{v.device} ({v.device_name}), torch {v.torch_version}"),
        ("policy", f"precision {v.precision}; allow {', '.join(v.allow) or 'none'}"),
        ("stage", v.stage), ("reason", v.reason),
    ]
    if v.correct:
        rows += [
            ("max abs / rel err", f"{v.max_abs_err:.3g} / {v.max_rel_err:.3g} (norm {v.rel_norm_err:.3g})"
             if v.max_abs_err is not None else "-"),
        ]
    if v.candidate_us is not None:
        rows += [
            ("eager", _us(v.eager_us, v.eager_iqr_us)),
            ("torch.compile", _us(v.compile_us, v.compile_iqr_us)),
            ("candidate", _us(v.candidate_us, v.candidate_iqr_us)),
            ("speed-up vs eager", _ratio(v.speedup_vs_eager, v.speedup_vs_eager_ci)),
            ("speed-up vs compile", _ratio(v.speedup_vs_compile, v.speedup_vs_compile_ci)),
            ("timed rounds", str(v.timing_rounds)),
        ]
        if v.reported_us is not None:  # a diagnostic: the verdict's figure is the judge's clock
            rows.append(("its own events", _us(v.reported_us)))
    if v.sol_us is not None:
        rows += [("speed of light", sol_text(v)), ("share of SOL", sol_shares(v))]
    if v.floor_us is not None:
        rows.append(("physical floor", f"{_us(v.floor_us)} ({v.floor_basis})"))
    for note in v.notes:
        rows.append(("note", note))
    for key, value in rows:
        table.add_row(key, str(value))
    return table


# --- chat rendering: code, diffs, streamed markdown, a live status line ----------------------
_LEXERS = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".cc": "cpp",
           ".cxx": "cpp", ".h": "cpp", ".hpp": "cpp", ".c": "c", ".sh": "bash", ".md": "markdown",
           ".json": "json"}


def lexer_for(name: str) -> str:
    """The pygments lexer for a file name (by suffix), or the name itself if it is one."""
    suffix = os.path.splitext(name)[1].lower()
    return _LEXERS.get(suffix, "text") if suffix else (name or "text")


def code(source: str, name: str = "python", *, max_lines: int | None = None) -> Any:
    """Syntax-highlighted source (`name`: a file name or a lexer such as "cuda" or "cpp")."""
    from rich.syntax import Syntax

    lines = source.splitlines()
    text = source
    if max_lines and len(lines) > max_lines:
        text = "\n".join(lines[:max_lines]) + f"\n… {len(lines) - max_lines} more lines"
    return Syntax(text, lexer_for(name), line_numbers=False, word_wrap=False,
                  background_color="default")


def diff(old: str, new: str, old_name: str, new_name: str, *, max_lines: int = 200) -> Any | None:
    """A coloured unified diff of two texts, or None when they are identical."""
    import difflib

    from rich.text import Text

    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name,
                                      lineterm=""))
    if not lines:
        return None
    out = Text()
    for line in lines[:max_lines]:
        style = ("bold" if line.startswith(("---", "+++")) else "cyan" if line.startswith("@@")
                 else "green" if line.startswith("+") else "red" if line.startswith("-") else "")
        out.append(line + "\n", style=style)  # Text, not markup: code holds [brackets]
    if len(lines) > max_lines:
        out.append(f"… {len(lines) - max_lines} more diff lines\n", style="dim")
    return out


class MarkdownStream:
    """Assistant text rendered as Markdown while it streams in.

    On a terminal, finished lines are printed once and only the last few stay in a live
    area that is redrawn (at most every `min_interval` s, since each redraw re-renders the
    whole text). Elsewhere (pipes, logs, tests) the Markdown is printed once, at close().
    """

    def __init__(self, console: Any, *, live_lines: int = 6, min_interval: float = 0.1) -> None:
        self.console = console
        self.live_lines = live_lines
        self.min_interval = min_interval
        self.text = ""
        self._live: Any = None
        self._printed = 0  # rendered lines already printed above the live area
        self._last = 0.0

    def write(self, chunk: str) -> None:
        self.text += chunk
        if not self.console.is_terminal:
            return
        now = time.monotonic()
        if now - self._last >= self.min_interval:
            self._last = now
            self._render(final=False)

    def close(self) -> None:
        """Print what is left and end the live area; safe to call when nothing streamed."""
        try:
            if self.text.strip():
                if self.console.is_terminal:
                    self._render(final=True)
                else:
                    self._print_plain()
        finally:
            if self._live is not None:
                self._live.stop()
            self.text, self._live, self._printed = "", None, 0

    def _print_plain(self) -> None:
        """Pipes and logs: the rendered Markdown once, without the padding to the full width."""
        from rich.markdown import Markdown
        from rich.segment import Segment, SegmentLines

        lines = []
        for line in self.console.render_lines(Markdown(self.text), pad=False):
            while line and not line[-1].control and not line[-1].text.strip():
                line = line[:-1]
            if line:
                line[-1] = Segment(line[-1].text.rstrip(), line[-1].style)
            lines.append(line)
        self.console.print(SegmentLines(lines, new_lines=True))

    def _render(self, final: bool) -> None:
        from rich.live import Live
        from rich.markdown import Markdown
        from rich.segment import SegmentLines

        lines = self.console.render_lines(Markdown(self.text), pad=False)
        stable = len(lines) if final else max(0, len(lines) - self.live_lines)
        if self._live is None and not final:
            self._live = Live(console=self.console, transient=True, auto_refresh=False)
            self._live.start()
        if self._live is not None:  # new tail first: printing above the live area redraws it
            self._live.update(SegmentLines(lines[stable:], new_lines=True), refresh=True)
        if stable > self._printed:
            self.console.print(SegmentLines(lines[self._printed:stable], new_lines=True))
            self._printed = stable


@contextmanager
def live_status(console: Any, label: str, *, announce: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner line with the elapsed time while a long step (build, verify, timing) runs; it
    yields `update(stage)`, which shows the step's current stage after the label. On a
    non-terminal (logs, pipes) stages are not shown: `label` is printed once if `announce`."""
    from rich.text import Text

    if not console.is_terminal:
        if announce:
            console.print(Text(f"{label} …", style="dim"))
        yield lambda stage: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn("dots"), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(label, total=None)
        # Cut to the width: a wrapped status line would leave its first half behind on redraw.
        room = max(20, console.width - 12)
        yield lambda stage: progress.update(task, description=clip(f"{label} · {stage}", room))


class Output:
    """Everything a run or a chat prints: the model's streamed reply (as Markdown), notes,
    warnings, errors, tables and live status lines, on one rich Console. Printing anything
    first ends the streamed reply, so the two never interleave."""

    def __init__(self, console: Any = None) -> None:
        self.console = console or _new_console()
        self._stream: MarkdownStream | None = None
        self._filter: ToolBlockFilter | None = None  # the model's tool-call blocks are not prose

    def print(self, *renderables: Any) -> None:
        self.end_stream()
        self.console.print(*renderables)

    def print_text(self, text: str, style: str = "", *, one_line: bool = False) -> None:
        """Print plain text (never parsed as rich markup: code and paths hold [brackets]);
        `one_line`: never wrapped (a log keeps one line per step; cut it to fit a terminal)."""
        from rich.text import Text

        self.end_stream()
        self.console.print(Text(text, style=style), soft_wrap=one_line)

    def say(self, text: str) -> None:
        self.print_text(text)

    def note(self, text: str) -> None:
        self.print_text(text, "dim")

    def ok(self, text: str) -> None:
        self.print_text(text, "green")

    def warn(self, text: str) -> None:
        self.print_text(text, "yellow")

    def error(self, text: str) -> None:
        from rich.text import Text

        self.end_stream()
        self.console.print(Text.assemble(("error: ", "bold red"), text))

    def lines(self, rows: Iterable[tuple[str, str]], *, width: int = 12) -> None:
        """Aligned `name  text` rows (help, lists)."""
        from rich.text import Text

        self.end_stream()
        for name, text in rows:
            self.console.print(Text.assemble((f"{name:<{width}}", "bold cyan"), " ", text))

    def assistant_text(self, chunk: str) -> None:
        """One streamed piece of the model's reply (rendered as Markdown); text tool-call
        blocks are left out (streamfilter.py)."""
        if self._filter is None:
            self._filter = ToolBlockFilter(self._markdown)
        self._filter.write(chunk)

    def _markdown(self, text: str) -> None:
        if self._stream is None:
            self._stream = MarkdownStream(self.console)
        self._stream.write(text)

    def end_stream(self) -> None:
        """Finish the model's streamed reply, if one is open."""
        text_filter, self._filter = self._filter, None
        if text_filter is not None:
            text_filter.close()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    @contextmanager
    def status(self, label: str, *, announce: bool = True) -> Iterator[Callable[[str], None]]:
        """A live status line with elapsed time (build, verify, timing take tens of seconds);
        yields `update(stage)` (see live_status)."""
        self.end_stream()
        with live_status(self.console, label, announce=announce) as update:
            yield update
