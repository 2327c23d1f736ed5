"""`kcoder suite --results FILE`: a results log kept across slices, device calls and sessions.

The suite runs with a fake task runner here (verdict records made up, nothing built or timed):
what is tested is which problems a run takes, what it appends, and where a slice stops; the
real evaluator's records are test_suite.py's. The identity of a run (commit, device, torch) is
given, as a GPU machine would state it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import PROBLEMS, ROOT, run_kcoder

from kcoder.settings import Settings
from kcoder.suite import ledger
from kcoder.suite.command import SuitePlan, run_suite, settings_fields
from kcoder.suite.problems import SuiteInputError
from kcoder.verdict import Verdict

H100 = {"commit": "abc123", "device": "cpu", "device_name": "NVIDIA H100 80GB HBM3, sm_90",
        "torch_version": "2.11.0+cu130", "options": {"precision": "strict", "stop_after": "timing",
                                                    "allow": ["conv", "gemm"], "no_compile": False, "budget": 1.0}}


@pytest.fixture(autouse=True)
def no_plots(monkeypatch):
    """The plots are test_suite.py's; here they would only cost seconds."""
    monkeypatch.setattr("kcoder.suite.plots.write_plots", lambda *args: [])


@pytest.fixture
def slice_set(tmp_path):
    """A KernelBench-like level folder of four problems, each with a solution by name."""
    level = tmp_path / "kb" / "level1"
    sols = tmp_path / "sols"
    level.mkdir(parents=True)
    sols.mkdir()
    source = (PROBLEMS / "scale_add.py").read_text()
    for i, name in enumerate(("1_a", "2_b", "3_c", "4_d")):
        (level / f"{name}.py").write_text(source)
        (sols / f"{name}.py").write_text(f"# candidate {i}\n")
    return level, sols


def fake_execute(log: list[str], seconds: float = 0.0):
    """A task runner that records which problems it ran and returns an accepted verdict."""

    def execute(spec: dict, slot) -> dict:
        log.append(spec["name"])
        time.sleep(seconds)
        v = Verdict(device="cpu", device_name=H100["device_name"], torch_version=H100["torch_version"],
                    compiled=True, correct=True, reward=3, status="accepted", eager_us=200.0, compile_us=110.0,
                    candidate_us=100.0, speedup_vs_eager=2.0, speedup_vs_compile=1.1, sol_us=80.0,
                    candidate_sol_fraction=0.8, compile_sol_fraction=0.73)
        return {"name": spec["name"], "mode": "eval", "problem": spec["problem"], "solution": spec["solution"],
                "status": "accepted", "reason": "", "verdict": v.to_dict(), "seconds": 1.5, "slot": slot.name}

    return execute


def plan(slice_set, results, names=None) -> SuitePlan:
    level, sols = slice_set
    sources = [str(level / f"{n}.py") for n in names] if names else [str(level)]
    return SuitePlan(sources=sources, mode="eval", solutions=str(sols), results=str(results),
                     settings=settings_fields(Settings(device="cpu", allow=["gemm", "conv"], budget=1.0)))


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_slices_resume_from_the_results_file_and_append(slice_set, tmp_path):
    results = tmp_path / "bench" / "results" / "kernelbench-h100.jsonl"
    ran: list[str] = []
    first = run_suite(plan(slice_set, results), tmp_path / "s1", backend="pool", workers=1,
                      execute=fake_execute(ran), ident=H100, limit=2)
    assert ran == ["1_a", "2_b"] and first["left"] == ["3_c", "4_d"]
    rows = rows_of(results)
    assert [r["name"] for r in rows] == ["1_a", "2_b"]
    row = rows[0]
    assert row["level"] == 1 and row["problem"] == "level1/1_a.py" and row["commit"] == "abc123"
    assert row["device_name"] == "NVIDIA H100 80GB HBM3, sm_90" and row["torch_version"] == "2.11.0+cu130"
    assert row["candidate_sha256"] == ledger.sha256("# candidate 0\n")
    assert row["speedup_vs_compile"] == 1.1 and row["candidate_sol_fraction"] == 0.8 and row["status"] == "accepted"
    assert row["options"]["allow"] == ["conv", "gemm"] and row["options"]["budget"] == 1.0

    # A new suite folder (the next device call), the same results file: only the rest runs.
    ran.clear()
    second = run_suite(plan(slice_set, results), tmp_path / "s2", backend="pool", workers=1,
                       execute=fake_execute(ran), ident=H100)
    assert ran == ["3_c", "4_d"] and second["in_results"] == ["1_a", "2_b"] and second["left"] == []
    assert [r["name"] for r in rows_of(results)] == ["1_a", "2_b", "3_c", "4_d"]

    # Nothing left: nothing runs, nothing is appended; --force runs them all again.
    ran.clear()
    run_suite(plan(slice_set, results), tmp_path / "s3", backend="pool", workers=1, execute=fake_execute(ran),
              ident=H100)
    assert ran == [] and len(rows_of(results)) == 4
    run_suite(plan(slice_set, results, ["2_b"]), tmp_path / "s3", backend="pool", workers=1,
              execute=fake_execute(ran), ident=H100, force=True)
    assert ran == ["2_b"] and len(rows_of(results)) == 5


def test_another_candidate_commit_or_device_runs_again(slice_set, tmp_path):
    level, sols = slice_set
    results = tmp_path / "results.jsonl"
    ran: list[str] = []
    run_suite(plan(slice_set, results), tmp_path / "s1", backend="pool", workers=1, execute=fake_execute(ran),
              ident=H100)
    assert len(ran) == 4
    (sols / "3_c.py").write_text("# candidate 2, rendered again by newer templates\n")
    ran.clear()
    run_suite(plan(slice_set, results), tmp_path / "s2", backend="pool", workers=1, execute=fake_execute(ran),
              ident=H100)
    assert ran == ["3_c"]
    for i, other in enumerate(({**H100, "commit": "def456"}, {**H100, "device_name": "NVIDIA H200, sm_90"},
                               {**H100, "options": {**H100["options"], "precision": "relaxed"}})):
        ran.clear()
        run_suite(plan(slice_set, results, ["1_a"]), tmp_path / f"other{i}", backend="pool", workers=1,
                  execute=fake_execute(ran), ident=other)
        assert ran == ["1_a"], other


def test_pending_is_a_pure_function_of_specs_rows_and_identity():
    specs = [{"name": n, "solution_source": f"# {n}\n"} for n in ("a", "b", "c", "d")]
    rows = [{"name": "a", "candidate_sha256": ledger.sha256("# a\n"), "status": "accepted", **H100},
            {"name": "b", "candidate_sha256": ledger.sha256("# b\n"), "status": "rejected", **H100},
            # kcoder's own failure is not the candidate's verdict: run it again
            {"name": "c", "candidate_sha256": ledger.sha256("# c\n"), "status": "error", **H100},
            {"name": "d", "candidate_sha256": ledger.sha256("# older d\n"), "status": "accepted", **H100}]
    todo, skipped = ledger.pending(specs, rows, H100)
    assert [s["name"] for s in todo] == ["c", "d"] and skipped == ["a", "b"]
    todo, skipped = ledger.pending(specs, rows, H100, force=True)
    assert len(todo) == 4 and skipped == []


def test_a_time_budget_ends_the_slice_after_the_task_in_flight(slice_set, tmp_path):
    results = tmp_path / "results.jsonl"
    ran: list[str] = []
    summary = run_suite(plan(slice_set, results), tmp_path / "s1", backend="pool", workers=1,
                        execute=fake_execute(ran, seconds=0.6), ident=H100, time_budget_s=1.0)
    assert ran == ["1_a", "2_b"]  # the second started before the budget ran out and finished
    assert summary["left"] == ["3_c", "4_d"] and summary["problems"] == 2
    assert [r["name"] for r in rows_of(results)] == ["1_a", "2_b"]


def test_results_file_that_is_not_one_is_named(slice_set, tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"name": "1_a", "candidate_sha256": "x"}\n{"name": "2_b", "cand\n')  # a cut last line
    assert [r["name"] for r in ledger.load(results)] == ["1_a"]
    results.write_text('{"name": "1_a", "candidate_sha256": "x"}\n[1, 2]\n')
    with pytest.raises(SuiteInputError, match=r"results.jsonl: line 2 is not a results row"):
        run_suite(plan(slice_set, results), tmp_path / "s1", backend="pool", execute=fake_execute([]), ident=H100)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout holding a kcoder/ package (one commit), no config or repository of the
    host's leaking in; returns (its folder, a git runner)."""
    home = tmp_path / "home"
    home.mkdir()
    for name, value in (("HOME", str(home)), ("GIT_CONFIG_NOSYSTEM", "1"), ("GIT_CONFIG_GLOBAL", str(home / "cfg")),
                        ("GIT_CEILING_DIRECTORIES", str(tmp_path))):
        monkeypatch.setenv(name, value)
    for name in ("KCODER_COMMIT", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "checkout"
    (root / "kcoder").mkdir(parents=True)
    (root / "kcoder" / "judge.py").write_text("JUDGE = 1\n")
    (root / "README.md").write_text("readme\n")

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=root,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    return root, git


def test_commit_is_the_checkouts_head_dirty_when_its_tracked_kcoder_files_differ(checkout):
    root, git = checkout
    head = git("rev-parse", "HEAD")
    assert ledger.kcoder_commit(root) == head and len(head) == 40
    (root / "kcoder" / "new_module.py").write_text("# untracked\n")
    (root / "README.md").write_text("changed, but not under kcoder/\n")
    assert ledger.kcoder_commit(root) == head
    (root / "kcoder" / "judge.py").write_text("JUDGE = 2\n")
    assert ledger.kcoder_commit(root) == head + "+dirty"
    git("add", "kcoder/judge.py")  # staged, not committed: still not HEAD's code
    assert ledger.kcoder_commit(root) == head + "+dirty"
    git("commit", "-q", "-m", "two")
    assert ledger.kcoder_commit(root) == git("rev-parse", "HEAD") != head


def test_commit_is_the_environments_or_unknown(checkout, monkeypatch, tmp_path):
    root, git = checkout
    monkeypatch.setenv("KCODER_COMMIT", "0123abc\n")
    assert ledger.kcoder_commit(root) == "0123abc"
    monkeypatch.delenv("KCODER_COMMIT")
    (tmp_path / "plain" / "kcoder").mkdir(parents=True)
    assert ledger.kcoder_commit(tmp_path / "plain") == "unknown"  # no git checkout there (a pip install)
    assert ledger.kcoder_commit(tmp_path / "nowhere") == "unknown"
    # a package inside some other project's checkout that does not track it (a venv in a project)
    (root / ".gitignore").write_text("site/\n")
    (root / "site" / "kcoder").mkdir(parents=True)
    (root / "site" / "kcoder" / "judge.py").write_text("JUDGE = 1\n")
    assert ledger.kcoder_commit(root / "site") == "unknown"
    empty = tmp_path / "empty"
    (empty / "kcoder").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    (empty / "kcoder" / "judge.py").write_text("JUDGE = 1\n")
    subprocess.run(["git", "-C", str(empty), "add", "."], check=True)
    assert ledger.kcoder_commit(empty) == "unknown"  # tracked, but no commit yet
    monkeypatch.setenv("PATH", str(tmp_path / "home"))  # no git executable to run
    assert ledger.kcoder_commit(root) == "unknown"
    monkeypatch.setitem(sys.modules, "git", None)  # gitpython cannot be imported (it raises so without git)
    assert ledger.kcoder_commit(root) == "unknown"


def test_this_kcoders_commit():
    found = ledger.kcoder_commit()
    assert found == "unknown" or len(found.split("+")[0]) == 40


def test_identity_is_what_a_verdict_states():
    import torch

    from kcoder.hostinfo import cpu_model

    found = ledger.identity("cpu", settings_fields(Settings(device="cpu", precision="relaxed")))
    assert found["device_name"] == cpu_model() and found["torch_version"] == torch.__version__
    assert found["options"]["precision"] == "relaxed" and found["commit"]


def test_identity_of_a_gpu_is_nvidia_smis_named_as_a_verdict_names_it(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from kcoder.hostinfo import cuda_device

    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ -n "$SMI_FAIL" ] && exit 9\n'
                   'echo "NVIDIA H100 80GB HBM3, 9.0"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    found = ledger.identity("cuda", settings_fields(Settings(device="cuda")))
    # what the reference process states (hostinfo.cuda_device of torch) for the same card
    card = SimpleNamespace(cuda=SimpleNamespace(get_device_name=lambda i: "NVIDIA H100 80GB HBM3",
                                                get_device_capability=lambda i: (9, 0)))
    assert found["device_name"] == cuda_device(card) == "NVIDIA H100 80GB HBM3, sm_90"
    assert calls.read_text().split()[-2:] == ["-i", "3"]  # the GPU a judge of this environment gets
    monkeypatch.setenv("SMI_FAIL", "1")
    assert ledger.identity("cuda", {})["device_name"] == ""  # unknown: no row matches it, nothing is skipped
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert ledger.identity("cuda", {})["device_name"] == ""


def test_identity_neither_imports_torch_nor_starts_python():
    code = ("import subprocess, sys\nfrom kcoder.suite import ledger\n"
            "def no_python(cmd, *a, **k):\n    assert 'python' not in str(cmd[0]), cmd\n    return real(cmd, *a, **k)\n"
            "real, subprocess.Popen = subprocess.Popen, no_python\n"
            "found = ledger.identity('cpu', {})\n"
            "assert 'torch' not in sys.modules and found['torch_version'], found\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_bad_slice_options_are_one_line(slice_set, tmp_path):
    level, sols = slice_set
    proc = run_kcoder("suite", str(level), "--mode", "optimize", "--results", str(tmp_path / "r.jsonl"),
                      "--device", "cpu", "--backend", "pool", "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "--results keeps eval verdicts" in proc.stderr, proc.stderr
    proc = run_kcoder("suite", str(level), "--solutions", str(sols), "--limit", "0", "--device", "cpu",
                      "--backend", "pool", "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "--limit must be positive" in proc.stderr and "Traceback" not in proc.stderr
