"""`kcoder chat` end to end on the cpu target: scripted model -> real litellm -> real tools ->
real harness -> real git. Candidates come from tests/sources.py so the C++ build is shared
with the rest of the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from agent.llm_server import call, reply
from helpers import fast_options
from sources import candidate_source

from kcoder.evaluate import evaluate

from .driver import drive, enter

GOOD = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")
GOOD_EDITED = GOOD.replace("self.scale = scale", "self.scale = float(scale)")
SPIN = candidate_source("_ext.spin_forever()\nreturn x")

pytestmark = pytest.mark.slow


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def user_state(repo: Path) -> dict:
    """Everything of the user's that kcoder must leave alone: HEAD, branch, index, other refs,
    status, and the bytes of every file in the working tree."""
    files = {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(repo).parts}
    refs = [r for r in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
            if not r.startswith("refs/heads/kcoder/")]
    return {"head": git(repo, "rev-parse", "HEAD"), "branch": git(repo, "symbolic-ref", "HEAD"),
            "index": (repo / ".git" / "index").read_bytes(), "refs": refs, "files": files,
            "status": git(repo, "status", "--porcelain=v2", "--untracked-files=all")}


@pytest.fixture
def repo(tmp_path: Path, problem: Path) -> Path:
    """A real repository holding the problem, with staged, unstaged and untracked changes."""
    root = problem.parent
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    (root / "notes.txt").write_text("committed\n")
    git(root, "add", "scale_add.py", "notes.txt")
    git(root, "commit", "-q", "-m", "initial")
    (root / "notes.txt").write_text("committed\nuncommitted edit\n")
    (root / "staged.txt").write_text("staged, not committed\n")
    git(root, "add", "staged.txt")
    (root / "scratch.txt").write_text("untracked\n")
    return root


def test_change_eval_diff_accept_commit_undo(scripted, problem, repo, tmp_path):
    server = scripted([
        reply("I'll fuse the three ops into one C++ loop.",
              call("write_file", path="model_new.py", content=GOOD)),
        reply("Wrote `model_new.py`: one pass computes `relu(x * scale + y)`."),
        reply("", call("edit_file", path="model_new.py", old_string="self.scale = scale",
                       new_string="self.scale = float(scale)")),
        reply("The scale is now stored as a float."),
    ])
    before = user_state(repo)
    run = drive(problem, enter(
        "write a fused kernel", "/eval", "store the scale as a float", "/diff", "/diff model.py",
        "/accept", "/bench", "/accept", "/commit", "/undo", "/undo", "/quit"), tmp_path, server=server)
    out = run.output
    assert run.code == 0
    assert out.count("CORRECT") == 1 and "ACCEPTED" in out  # /eval verified, /bench timed
    assert "-        self.scale = scale" in out and "+        self.scale = float(scale)" in out
    assert "-    def forward(self, x: torch.Tensor, y: torch.Tensor)" in out  # /diff model.py
    assert "model_new.py has not passed verification as it is now" in out  # edited, not yet judged
    # CPU timings are noisy: the speed-up itself is not asserted, only that it is reported.
    assert re.search(r"accepted model_new.py \(candidates/model_new_0002.py; \d+\.\d\dx vs torch.compile\)", out)
    assert "committed " in out and "on branch kcoder/scale_add" in out
    assert "deleted (kcoder had created it)" in out
    assert "kcoder has made no commits" in out  # the second /undo: nothing of kcoder's left

    # The commit existed on kcoder/scale_add with the verified bytes and the trailers ...
    log = [json.loads(line) for line in (repo / ".git" / "kcoder" / "commits.jsonl").read_text().splitlines()]
    assert [r["action"] for r in log] == ["commit", "undo"]
    commit = log[0]["commit"]
    assert f"committed {commit[:10]}" in out
    assert git(repo, "show", f"{commit}:kcoder/scale_add/model_new.py") == GOOD_EDITED
    files = git(repo, "show", "--name-only", "--format=", commit).split()
    assert sorted(files) == ["kcoder/scale_add/model_new.py", "kcoder/scale_add/report.json",
                             "kcoder/scale_add/report.md"]
    message = git(repo, "log", "-1", "--format=%B", commit)
    assert re.search(r"^Kcoder-Reward: [123]$", message, re.MULTILINE)
    assert re.search(r"^Kcoder-Speedup-Compile: \d+\.\d\d$", message, re.MULTILINE)
    assert "Kcoder-Model: openai/scripted" in message and "Kcoder-Torch: 2." in message
    # Before committing, the accepted bytes were verified built as plain load_inline builds them.
    committed_report = json.loads(git(repo, "show", f"{commit}:kcoder/scale_add/report.json"))
    assert committed_report["plain_build"] == "verified"
    plain = [json.loads(line) for line in (run.run_dir / "trajectory.jsonl").open()
             if json.loads(line)["type"] == "plain_build"]
    assert len(plain) == 1 and plain[0]["verdict"]["correct"]
    assert any("plain build" in n for n in plain[0]["verdict"]["notes"]), plain[0]["verdict"]["notes"]
    assert git(repo, "rev-parse", f"{commit}^") == before["head"]
    # ... and /undo removed it and nothing else: the user's state is byte-identical.
    assert git(repo, "for-each-ref", "refs/heads/kcoder/") == ""
    assert user_state(repo) == before


def _workers() -> list[int]:
    """Evaluation workers started by this process (the harness runs one per candidate)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"kcoder.evaluate.candidate.worker" in cmdline:
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def terminal_sigint():
    """SIGINT raising KeyboardInterrupt, as in a terminal. A test run started in the background
    (`.ci/run &`) inherits SIGINT as ignored, and Python then never raises it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_a_hanging_evaluation_and_the_chat_goes_on(scripted, problem, tmp_path, terminal_sigint):
    # Build the spinning candidate's extension first (the run's cache may be cold), so Ctrl-C
    # lands while verification spins in C++, not while the extension compiles.
    prebuilt = tmp_path / "prebuild" / "model_new.py"
    prebuilt.parent.mkdir()
    prebuilt.write_text(SPIN)
    assert evaluate(problem, prebuilt, fast_options(stop_after="build")).compiled
    server = scripted([
        reply("Writing and verifying.", call("write_file", path="model_new.py", content=SPIN),
              call("verify")),
        reply("Understood, I stopped."),
    ])
    seen: list[int] = []

    def press_ctrl_c_when_the_worker_spins() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not seen:
            seen.extend(_workers())
            time.sleep(0.1)
        time.sleep(4)  # build loaded from cache; verification is now spinning in C++
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in the terminal sends

    threading.Thread(target=press_ctrl_c_when_the_worker_spins, daemon=True).start()
    started = time.monotonic()
    run = drive(problem, enter("try the spinning kernel", "/cost", "did it stop?", "/quit"),
                tmp_path, server=server)
    took = time.monotonic() - started
    assert seen, "the evaluation worker never started"
    assert not any(Path(f"/proc/{pid}").exists() for pid in seen), "the worker survived Ctrl-C"
    assert took < 60, f"the verify stage's own time limit (180 s) did the stopping: {took:.0f} s"
    assert run.code == 0
    assert "cancelled (Ctrl-C)" in run.output
    assert "model calls" in run.output  # /cost ran after the cancelled turn
    assert "Understood, I stopped." in run.output
    # The history stays valid: the interrupted call got an answer before the next request.
    messages = server.requests[1]["messages"]
    calls = [tc["id"] for m in messages if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    answers = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert set(calls) == set(answers)
    assert answers[calls[0]].startswith("wrote model_new.py")
    assert answers[calls[1]].startswith("Cancelled: the user pressed Ctrl-C")
    assert messages[-1] == {"role": "user", "content": "did it stop?"}
