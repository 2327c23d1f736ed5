"""`kcoder optimize` and `kcoder chat` as a person at a terminal sees them: the real CLI in a
pseudo-terminal, a scripted model using the text tool-call protocol (the default for openai/*
models), the real harness on the cpu target, a real git repository.

What is checked: the live status names the stage while a candidate builds and is verified;
the model's tool block is never echoed (one line per tool call instead); the run leaves
`git status` as it was; the commit holds repository-relative paths and the device by name;
and SIGTERM or SIGHUP to kcoder during a hanging evaluation leaves no process behind.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS
from ptyrun import PtyRun
from sources import candidate_source

from kcoder.evaluate.reaper import descendants
from kcoder.hostinfo import cpu_model

from .llm_server import text_tool_reply

GOOD = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")
SPIN = candidate_source("_ext.spin_forever()\nreturn x")

pytestmark = pytest.mark.slow


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository holding the problem, with an untracked file of the user's."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setenv("KCODER_API_KEY", "test")
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copyfile(PROBLEMS / "scale_add.py", root / "scale_add.py")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    git(root, "add", "scale_add.py")
    git(root, "commit", "-q", "-m", "initial")
    (root / "scratch.txt").write_text("the user's untracked file\n")
    return root


def status(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


def test_optimize_shows_stages_not_tool_blocks_and_keeps_git_clean(scripted, repo):
    server = scripted([
        text_tool_reply("I'll fuse scale, add and relu into one C++ loop.", "write_file",
                        path="model_new.py", content=GOOD),
        text_tool_reply("Check that it builds and is correct.", "verify"),
    ])
    before = status(repo)
    run = PtyRun("optimize", "scale_add.py", "--model", "openai/scripted", "--api-base", server.base_url,
                 "--no-preflight", "--device", "cpu", "--max-turns", "2", "--commit", cwd=repo)
    try:
        # While the candidate builds and is verified, the status line says so, with a clock.
        run.expect(r"build → verify: model_new_0001\.py · (building|loading the problem).* 0:00:\d\d")
        run.expect(r"build → verify: model_new_0001\.py · verifying input set [1-5] of 5.* 0:00:\d\d")
        run.expect(r"✓ model_new_0001\.py: correct on 5 input sets · \d+\.\d s")
        run.expect(r"plain load_inline build check: model_new_0001\.py")
        code = run.wait(600)
    finally:
        run.close()
    text = run.text
    assert code == 0, text[-3000:]
    assert "I'll fuse scale, add and relu into one C++ loop." in text
    assert re.search(r"→ write_file model_new\.py \(new file, \d+ lines, \d+\.\d KB\)", text) and "→ verify" in text
    assert "```" not in text and '"name"' not in text and "scale_add_relu(x, y, self.scale)" not in text
    assert "committed " in text and "on branch kcoder/scale_add" in text
    # The run directory (.kcoder/runs beside model.py) is not the user's: git status is unchanged.
    assert status(repo) == before and any((repo / ".kcoder" / "runs").iterdir())
    assert "/.kcoder/runs/" in (repo / ".git" / "info" / "exclude").read_text()
    # What left the machine: relative paths, the device by name.
    subject = git(repo, "log", "-1", "--format=%s", "kcoder/scale_add").strip()
    assert subject.endswith(f"({cpu_model()})") and "(x86_64)" not in subject
    committed = git(repo, "show", "kcoder/scale_add:kcoder/scale_add/report.json") + git(
        repo, "show", "kcoder/scale_add:kcoder/scale_add/report.md")
    assert str(repo) not in committed and str(Path.home()) not in committed
    assert json.loads(git(repo, "show", "kcoder/scale_add:kcoder/scale_add/report.json"))[
        "candidate"].startswith(".kcoder/runs/scale_add-")


def test_chat_turn_shows_one_line_per_call_and_a_status(scripted, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_HOME", str(tmp_path / "kcoder-home"))
    server = scripted([
        text_tool_reply("One fused loop it is.", "write_file", path="model_new.py", content=GOOD),
        text_tool_reply("Now let me check it.", "verify"),
        {"content": "It builds and matches the reference on 5 input sets.", "tool_calls": []},
    ])
    before = status(repo)
    run = PtyRun("chat", "scale_add.py", "--model", "openai/scripted", "--api-base", server.base_url,
                 "--device", "cpu", cwd=repo)
    try:
        run.expect(r"kcoder>", timeout=120)
        run.send("write a fused kernel and check it\r")
        run.expect(r"build → verify: model_new_0001\.py · verifying input set [1-5] of 5.* 0:00:\d\d")
        run.expect(r"It builds and matches the reference on 5 input sets\.[\s\S]*kcoder>")  # its turn ended
        run.send("/quit\r")
        assert run.wait(120) == 0
    finally:
        run.close()
    text = run.text
    assert "One fused loop it is." in text and re.search(r"→ write_file model_new\.py \(new file, \d+ lines", text)
    assert re.search(r"✓ model_new_0001\.py: correct on 5 input sets", text)
    assert "```" not in text and '"name"' not in text and "scale_add_relu(x, y, self.scale)" not in text
    assert status(repo) == before


def _eval_processes(root: int) -> tuple[list[int], set[str]]:
    """Processes below `root` and the evaluation temp folders their command lines name."""
    pids = descendants(root)
    folders = set()
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        folders.update(re.findall(r"(/[^\x00\s]*?kcoder-eval-[^/\x00\s]+)", cmdline))
    return pids, folders


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_kcoder_ends_a_hanging_evaluation(scripted, repo, sig):
    server = scripted([
        text_tool_reply("Writing it.", "write_file", path="model_new.py", content=SPIN),
        text_tool_reply("Verify.", "verify"),
    ])
    run = PtyRun("optimize", "scale_add.py", "--model", "openai/scripted", "--api-base", server.base_url,
                 "--no-preflight", "--device", "cpu", "--max-turns", "2", cwd=repo)
    try:
        run.expect(r"verifying input set 1 of 5", timeout=600)  # the candidate spins from here on
        time.sleep(1.0)
        pids, folders = _eval_processes(run.proc.pid)
        assert any(b"kcoder.evaluate.candidate.worker" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in pids if _alive(p)), "the candidate's process should be running"
        assert folders, "the evaluation's temp folder should be on a command line"
        run.signal(sig)
        code = run.wait(60)
    finally:
        run.close()
    deadline = time.monotonic() + 10  # SIGKILLed processes are reaped by their new parent
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert code == 128 + sig
    assert [p for p in pids if _alive(p)] == []
    assert [f for f in folders if Path(f).exists()] == []
    report = json.loads(next((repo / ".kcoder" / "runs").glob("*/report.json")).read_text())
    assert report["status"] == "interrupted" and signal.Signals(sig).name in report["message"]
