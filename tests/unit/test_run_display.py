"""What a user reads during a run: the model's text without tool-call blocks, the judge's stages
in words, one-line verdicts, cut lines that say they were cut."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from kcoder import ui
from kcoder.evaluate.progress import StageReporter, build_note
from kcoder.streamfilter import ToolBlockFilter
from kcoder.verdict import Verdict

CALL = {"name": "write_file", "arguments": {"path": "a.py", "content": "x\n" * 50}}
BLOCK = "```tool\n" + json.dumps(CALL) + "\n```\n"


def filtered(text: str, step: int) -> tuple[str, int]:
    out: list[str] = []
    f = ToolBlockFilter(out.append)
    for i in range(0, len(text), step):
        f.write(text[i:i + step])
    f.close()
    return "".join(out), f.hidden


@pytest.mark.parametrize("step", [1, 3, 16, 10_000])  # however the stream is cut
def test_tool_blocks_are_held_back_and_prose_passes(step):
    prose = "I will fuse the ops.\n\nHere is `code` and ``` inline.\n"
    shown, hidden = filtered(prose + BLOCK + "After the call.", step)
    assert shown == prose + "After the call." and hidden == 1
    hermes = 'Calling: <tool_call>{"name": "verify", "arguments": {}}</tool_call> done\n'
    assert filtered(hermes, step) == ("Calling:  done\n", 1)
    multi = "Now:\n<tool_call>\n{\"name\": \"verify\"}\n</tool_call>\nThen more.\n"
    assert filtered(multi, step) == ("Now:\n\nThen more.\n", 1)
    example = "A JSON example:\n```json\n{\"size\": 3}\n```\n"
    assert filtered(example, step) == (example, 0)  # JSON that is not a tool call is prose
    json_call = "```json\n{\"name\": \"verify\", \"arguments\": {}}\n```\n"
    assert filtered(json_call, step) == ("", 1)
    python = "```python\nx = 1\n```\n"
    assert filtered(python, step) == (python, 0)


def test_an_unterminated_tool_block_stays_hidden():
    shown, _ = filtered("Writing.\n```tool\n{\"name\": \"write_file\", \"arguments\": {\"content\": \"a", 7)
    assert shown == "Writing.\n"


def test_output_streams_without_the_block():
    out = io.StringIO()
    view = ui.Output(Console(file=out, width=100))
    for i in range(0, len(BLOCK), 5):
        view.assistant_text(("Plan first.\n" + BLOCK)[i:i + 5])
    view.assistant_text(BLOCK[len(BLOCK) - len(BLOCK) % 5:])
    view.end_stream()
    assert out.getvalue() == "Plan first.\n"


def test_stages_in_words_with_the_build_note():
    seen: list[str] = []
    r = StageReporter(seen.append)
    r.reference_started()
    r.candidate_started()
    r.candidate_message({"phase": "compile"})
    r.candidate_message({"built": True, "notes": ["extension kcoder_testlib: built in 8.43 s (fast build: "
                                                  "precompiled torch header)"]})
    r.candidate_message({"op": "verify", "seed": 1, "label": "input set 2 of 5"})
    r.reference_message({"op": "baselines"})
    r.candidate_started()
    r.candidate_message({"op": "time", "seed": 2})
    r.candidate_message({"op": "time", "seed": 3})
    r.candidate_message({"op": "verify", "label": "audit call after timed round 2"})
    assert seen == ["loading the problem (reference process)", "building", "building: compiling (load_inline)",
                    "built · built in 8.4 s (fast build)", "verifying input set 2 of 5 · built in 8.4 s (fast build)",
                    "timing the baselines (eager, torch.compile) · built in 8.4 s (fast build)",
                    "restarting the candidate for timing · built in 8.4 s (fast build)",
                    "timing round 1 · built in 8.4 s (fast build)", "timing round 2 · built in 8.4 s (fast build)",
                    "timing: checking the audit call after timed round 2 · built in 8.4 s (fast build)"]
    assert build_note(["extension a: cached in 0.01 s (fast build)", "judge's clock: 1 us"]) == "cached build"
    assert build_note(["extension a: built in 30.0 s (plain build)"]) == "built in 30.0 s"


def test_verdict_lines():
    v = Verdict(problem="p", candidate="c", device="cpu", notes=["extension t: cached in 0.01 s (fast build)"])
    v.compiled, v.correct, v.n_input_sets, v.stage = True, True, 5, "verify"
    assert ui.verdict_line(v, "model_new_0001.py", 5.52, "verify") == (
        "✓ model_new_0001.py: correct on 5 input sets · 5.5 s, cached build", True)
    v.candidate_us, v.speedup_vs_eager, v.speedup_vs_compile, v.reward = 7405.8, 3.24, 1.09, 3
    assert ui.verdict_line(v, "m.py", 23.0, "timing")[0] == (
        "✓ m.py: 3.24x vs eager, 1.09x vs torch.compile (7.41 ms, reward 3) · 23.0 s, cached build")
    v.speedup_vs_compile, v.reward = None, 2  # --no-compile: unknown, not 0.00x
    assert ui.verdict_line(v, "m.py", 23.0, "timing")[0] == (
        "✓ m.py: 3.24x vs eager (7.41 ms, reward 2) · 23.0 s, cached build")
    bad = Verdict(problem="p", candidate="c", device="cpu").fail("build", "cpp_sources:5:36: error: expected ';'")
    assert ui.verdict_line(bad, "m.py", 9.0, "verify") == (
        "✗ m.py: failed at build: cpp_sources:5:36: error: expected ';' · 9.0 s", False)


def test_cut_lines_end_with_an_ellipsis():
    assert ui.clip("short", 10) == "short"
    assert ui.clip("x" * 30, 10) == "x" * 9 + "…"
    assert ui.clip("two\nlines", 20) == "two lines"
