"""Tools: path confinement, edit_file, bad calls answered with errors, evaluator tools."""

from __future__ import annotations

import json
import os

import pytest

from kcoder.agent.profiles import resolve_profile
from kcoder.agent.toolbox import Observation, Toolbox, ToolContext
from kcoder.evaluate.options import EvalOptions
from kcoder.replies import ToolCall
from kcoder.workspace import Workspace

from .fakes import FakeEvaluator


@pytest.fixture
def ws(problem, tmp_path) -> Workspace:
    return Workspace.create(problem, runs_dir=tmp_path / "runs")


@pytest.fixture
def box() -> Toolbox:
    return Toolbox(resolve_profile("anthropic/x").tools)


@pytest.fixture
def ctx(ws) -> ToolContext:
    return ToolContext(workspace=ws, options=EvalOptions(), evaluate=FakeEvaluator())


def run(box: Toolbox, ctx: ToolContext, name: str, args) -> Observation:
    raw = args if isinstance(args, str) else json.dumps(args)
    return box.call(ToolCall("id-1", name, raw), ctx)


def test_reference_is_read_only_copy(ws, problem, box, ctx):
    assert ws.reference.read_text() == problem.read_text()
    assert not os.access(ws.reference, os.W_OK) or os.geteuid() == 0
    obs = run(box, ctx, "write_file", {"path": "model.py", "content": "x"})
    assert not obs.ok and "read-only" in obs.text
    obs = run(box, ctx, "edit_file", {"path": "model.py", "old_string": "relu", "new_string": "x"})
    assert not obs.ok and "read-only" in obs.text
    assert ws.reference.read_text() == problem.read_text()


@pytest.mark.parametrize("path", ["../../../etc/passwd", "/etc/passwd", "best/../../x.py"])
def test_paths_are_confined(box, ctx, path):
    for name, args in [("read_file", {"path": path}),
                       ("write_file", {"path": path, "content": "x"})]:
        obs = run(box, ctx, name, args)
        assert not obs.ok and "outside the run workspace" in obs.text


def test_symlink_cannot_escape(ws, box, ctx, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    (ws.root / "link.txt").symlink_to(secret)
    obs = run(box, ctx, "read_file", {"path": "link.txt"})
    assert not obs.ok and "s3cret" not in obs.text


def test_list_files_does_not_follow_links_outside(ws, box, ctx, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s" * 12345)
    (outside / "inner.txt").write_text("x")
    (ws.root / "link.txt").symlink_to(outside / "secret.txt")
    (ws.root / "linkdir").symlink_to(outside, target_is_directory=True)
    (ws.root / "alias.py").symlink_to(ws.root / "model.py")  # inside: listed, as read_file reads it
    ws.candidate.write_text("x = 1\n")
    text = run(box, ctx, "list_files", {}).text
    assert "model_new.py  6 B" in text and "alias.py" in text
    assert "link.txt" not in text and "12345" not in text and "inner.txt" not in text
    assert not run(box, ctx, "read_file", {"path": "link.txt"}).ok  # the same confinement
    assert not run(box, ctx, "list_files", {"path": "linkdir"}).ok


def test_protected_run_files(box, ctx):
    for path in ["trajectory.jsonl", "best/model_new.py", "report.json", "candidates/x.py"]:
        obs = run(box, ctx, "write_file", {"path": path, "content": "x"})
        assert not obs.ok and "read-only" in obs.text, path


def test_write_read_edit_roundtrip(ws, box, ctx):
    src = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n"
    assert run(box, ctx, "write_file", {"path": "model_new.py", "content": src}).ok
    obs = run(box, ctx, "edit_file", {"path": "model_new.py", "old_string": "return x + 1",
                                      "new_string": "return x + 2"})
    assert not obs.ok and "matches 2 times" in obs.text
    obs = run(box, ctx, "edit_file", {"path": "model_new.py",
                                      "old_string": "def g(x):\n    return x + 1",
                                      "new_string": "def g(x):\n    return x * 2"})
    assert obs.ok and "line 5" in obs.text
    assert ws.candidate.read_text() == "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n"
    obs = run(box, ctx, "edit_file", {"path": "model_new.py", "old_string": "def  g(x):",
                                      "new_string": "h"})
    assert not obs.ok and "not found" in obs.text and "whitespace" in obs.text
    obs = run(box, ctx, "read_file", {"path": "model_new.py", "offset": 5, "limit": 2})
    assert obs.ok and obs.text.endswith("def g(x):\n    return x * 2")


def test_edit_file_exact_result(ws, box, ctx):
    ws.candidate.write_text("a = 1\nb = 2\n")
    assert run(box, ctx, "edit_file", {"path": "model_new.py", "old_string": "b = 2",
                                       "new_string": "b = 3"}).ok
    assert ws.candidate.read_text() == "a = 1\nb = 3\n"


@pytest.mark.parametrize(("name", "raw", "expect"), [
    ("write_file", '{"path": "model_new.py", "content": ', "not valid JSON"),
    ("write_file", '["model_new.py"]', "must be a JSON object"),
    ("write_file", '{"path": "model_new.py"}', "missing required argument(s): content"),
    ("read_file", '{"path": 3}', "must be a string"),
    ("read_file", '{"path": "model.py", "offset": true}', "must be a integer"),
    ("rm_rf", "{}", "unknown tool 'rm_rf'"),
])
def test_bad_calls_become_error_observations(box, ctx, name, raw, expect):
    obs = box.call(ToolCall("id", name, raw), ctx)
    assert not obs.ok and expect in obs.text


def test_unparseable_text_call(box, ctx):
    obs = box.call(ToolCall("id", "", "{", error="the tool block is not valid JSON"), ctx)
    assert not obs.ok and "not valid JSON" in obs.text


def test_long_output_truncated_with_note(ws, box, ctx):
    ws.candidate.write_text("\n".join(f"line {i}" for i in range(10_000)))
    obs = run(box, ctx, "read_file", {"path": "model_new.py"})
    assert obs.ok and len(obs.text) < 13_000 and "characters omitted" in obs.text
    assert "line 9999" in obs.text  # the tail survives


def test_list_files_marks_read_only(ws, box, ctx):
    ws.candidate.write_text("x = 1\n")
    text = run(box, ctx, "list_files", {}).text
    assert "model.py" in text and "(read-only)" in text and "model_new.py" in text


def test_evaluator_tools_snapshot_and_report(ws, box):
    fake = FakeEvaluator()
    calls = fake.calls
    ctx = ToolContext(workspace=ws, options=EvalOptions(), evaluate=fake)
    assert not run(box, ctx, "compile", {}).ok  # no model_new.py yet
    ws.candidate.write_text("# no act\n")
    obs = run(box, ctx, "compile", {})
    assert obs.ok and obs.text.startswith("PASSED build")  # the verdict comes first
    obs = run(box, ctx, "verify", {})
    assert not obs.ok and "output mismatch" in obs.text and obs.verdict is not None
    ws.candidate.write_text("# relu\n")
    obs = run(box, ctx, "benchmark", {})
    assert obs.ok and obs.verdict.correct
    assert [c[2] for c in calls] == ["build", "verify", "timing"]
    assert all(c[0] == ws.reference for c in calls)  # judged against the hashed copy
    snapshots = sorted((ws.root / "candidates").glob("*.py"))
    assert [s.name for s in snapshots] == ["model_new_0001.py", "model_new_0002.py"]


def test_finish_only_ends(box, ctx):
    obs = run(box, ctx, "finish", {"summary": "done, it is 10x faster"})
    assert obs.finish and obs.verdict is None


def test_cuda_agent_profile_interface(ws):
    prof = resolve_profile("hosted_vllm/ByteDance/CUDA-Agent")
    assert prof.name == "cuda-agent"
    box = Toolbox(prof.tools)
    names = [s["function"]["name"] for s in box.schemas()]
    assert names[:4] == ["bash", "read", "write", "edit"]
    fake = FakeEvaluator()
    calls = fake.calls
    ctx = ToolContext(workspace=ws, options=EvalOptions(), evaluate=fake)
    assert run(box, ctx, "write", {"file_path": "model_new.py", "content": "# relu\n"}).ok
    assert "relu" in run(box, ctx, "read", {"file_path": "model_new.py"}).text
    assert run(box, ctx, "bash", {"command": "python3 -m utils.verification"}).ok
    assert calls[-1][2] == "verify"
    obs = run(box, ctx, "bash", {"command": "rm -rf /"})
    assert not obs.ok and "not available" in obs.text
