"""The rendering helpers in kcoder.ui: diffs, code, streamed Markdown, status line."""

from __future__ import annotations

import io
import re

from rich.console import Console

from kcoder import ui

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-9](;[0-9;]*)?m")  # a foreground colour code
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    return ANSI.sub("", text)


def terminal(**kw) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=80, color_system="truecolor", **kw), out


def test_diff_is_coloured_and_none_when_identical():
    console, out = terminal()
    console.print(ui.diff("a\nb\n", "a\nc\n", "old.py", "new.py"))
    text = out.getvalue()
    assert "-b" in text and "+c" in text and ANSI_COLOUR.search(text)
    assert ui.diff("same\n", "same\n", "x", "y") is None


def test_no_color_is_respected(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    console = ui.console()
    out = io.StringIO()
    console.file = out
    console._force_terminal = True  # as if on a terminal: colours would otherwise show
    console.print(ui.diff("a\nb\n", "a\nc\n", "old.py", "new.py"))
    console.print(ui.code("__global__ void k(float* x) { x[0] = 1.f; }", "kernel.cu"))
    assert "+c" in out.getvalue() and "__global__" in out.getvalue()
    assert not ANSI_COLOUR.search(out.getvalue())


def test_code_picks_the_lexer_and_shortens():
    assert ui.lexer_for("k.cu") == "cuda" and ui.lexer_for("b.cpp") == "cpp"
    assert ui.lexer_for("model_new.py") == "python" and ui.lexer_for("cuda") == "cuda"
    console, out = terminal()
    console.print(ui.code("\n".join(f"x{i} = {i}" for i in range(10)), "a.py", max_lines=3))
    shown = plain(out.getvalue())
    assert "x2 = 2" in shown and "x3" not in shown and "7 more lines" in shown
    assert ANSI_COLOUR.search(out.getvalue())  # highlighted


def test_markdown_stream_on_a_terminal_prints_every_line_once():
    console, out = terminal()
    stream = ui.MarkdownStream(console, live_lines=2, min_interval=0)
    text = "# Plan\n\n" + "".join(f"- step {i}\n" for i in range(8)) + "\nDone **now**.\n"
    for i in range(0, len(text), 7):
        stream.write(text[i:i + 7])
    stream.close()
    shown = plain(out.getvalue())
    for i in range(8):
        assert f"step {i}" in shown
    assert "Done now." in shown  # the live area showed partial renders; this is the final one


def test_markdown_stream_elsewhere_prints_once_at_close():
    out = io.StringIO()
    stream = ui.MarkdownStream(Console(file=out, width=60))
    stream.write("Use a **warp** per row")
    assert out.getvalue() == ""
    stream.write(".\n")
    stream.close()
    assert out.getvalue() == "Use a warp per row.\n"  # rendered, no padding to the width


def test_live_status_shows_label_and_clock_then_clears():
    console, out = terminal()
    with ui.live_status(console, "build → verify: model_new.py"):
        pass
    shown = plain(out.getvalue())
    assert "build → verify: model_new.py" in shown
    assert re.search(r"\d+:\d\d:\d\d", shown)  # the elapsed-time column
    assert out.getvalue().endswith("\x1b[2K")  # the line is erased when the step ends
    piped = io.StringIO()
    with ui.live_status(Console(file=piped), "timing"):
        pass
    assert piped.getvalue() == "timing …\n"  # no spinner in logs: the label, once
