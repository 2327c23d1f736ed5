"""`kcoder suite` end to end on the cpu target, with the real evaluator and real builds (the
testlib and elementwise_chain sources the rest of the suite builds, so the build cache is
shared): the same three problems on the process pool and on a local Ray runtime give the same
summary; a killed suite resumes without running finished problems again.

The equality check runs with --stop-after verify: timings vary from run to run, verdicts
(compiled, correct, status, reason) do not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS, ROOT, run_kcoder
from sources import testlib_candidate

from kcoder.settings import Settings
from kcoder.suite.command import SuitePlan, run_suite, settings_fields

pytestmark = pytest.mark.slow
NAMES = ["elementwise_chain", "scale_add", "scale_add_wrong"]


@pytest.fixture(scope="module")
def problem_set(tmp_path_factory) -> tuple[Path, Path, Path]:
    """Two problem files with solutions matched by name, and an examples-style problem that
    finds its own solution_cpu.py."""
    root = tmp_path_factory.mktemp("suite")
    probs, sols = root / "problems", root / "solutions"
    probs.mkdir()
    sols.mkdir()
    shutil.copyfile(PROBLEMS / "scale_add.py", probs / "scale_add.py")
    shutil.copyfile(PROBLEMS / "scale_add.py", probs / "scale_add_wrong.py")
    (sols / "scale_add.py").write_text(testlib_candidate("return _ext.scale_add_relu(x, y, self.scale)"))
    (sols / "scale_add_wrong_solution.py").write_text(testlib_candidate("return _ext.no_relu(x, y, self.scale)"))
    return probs, sols, ROOT / "examples" / "elementwise_chain"


def plan_for(problem_set, **settings) -> SuitePlan:
    probs, sols, example = problem_set
    fields = settings_fields(Settings(device="cpu", stop_after="verify", no_compile=True, budget=0.3, **settings))
    return SuitePlan(sources=[str(probs), str(example)], mode="eval", solutions=str(sols), settings=fields)


def deterministic(out_dir: Path) -> dict:
    data = json.loads((out_dir / "summary.json").read_text())
    s = data["summary"]
    return {"counts": {k: s[k] for k in ("problems", "compiled", "correct", "compiled_pct", "correct_pct",
                                           "fast_p_vs_eager", "statuses")},
            "problems": [(r["name"], r["status"], r["compiled"], r["correct"]) for r in data["problems"]]}


def test_pool_and_ray_give_the_same_summary(problem_set, tmp_path):
    pytest.importorskip("ray")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_suite(plan_for(problem_set), tmp_path / "ray", backend="ray", workers=2)
    finally:
        ray.shutdown()
    run_suite(plan_for(problem_set), tmp_path / "pool", backend="pool", workers=1)
    ray_result, pool_result = deterministic(tmp_path / "ray"), deterministic(tmp_path / "pool")
    assert ray_result == pool_result
    assert pool_result["problems"] == [("elementwise_chain", "accepted", True, True),
                                       ("scale_add", "accepted", True, True),
                                       ("scale_add_wrong", "rejected", True, False)]
    assert pool_result["counts"]["correct_pct"] == 66.7
    # Same verdict JSON from both backends: the same fields, the same reasons.
    for backend in ("ray", "pool"):
        records = [json.loads(line) for line in (tmp_path / backend / "results.jsonl").read_text().splitlines()]
        assert sorted(r["name"] for r in records) == NAMES
        wrong = next(r for r in records if r["name"] == "scale_add_wrong")
        assert wrong["verdict"]["reason"].startswith("wrong answer on input set 1 of 5")
        assert wrong["verdict"]["candidate"].endswith("scale_add_wrong_solution.py")
    slots = {json.loads(line)["slot"] for line in (tmp_path / "ray" / "results.jsonl").read_text().splitlines()}
    assert all("/cpu" in s for s in slots)  # node id / slot: each ran on a Ray actor
    # The outputs: markdown, CSV (a row per problem), PNG plots.
    md = (tmp_path / "pool" / "summary.md").read_text()
    assert "| correct | 66.7% (2/3) |" in md and "| scale_add_wrong | rejected |" in md
    assert len((tmp_path / "pool" / "results.csv").read_text().splitlines()) == 4
    for png in ("speedup_vs_compile.png", "fast_p.png", "problems.png"):
        assert (tmp_path / "pool" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_killed_suite_resumes_without_rerunning_finished_problems(problem_set, tmp_path):
    probs, sols, example = problem_set
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kcoder", "suite", str(probs), str(example), "--solutions", str(sols),
           "--device", "cpu", "--backend", "pool", "--workers", "1", "--stop-after", "verify", "--out", str(out),
           "--results", str(tmp_path / "kept.jsonl")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=dict(os.environ))
    results = out / "results.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 1):
            assert proc.poll() is None, "the suite ended before it could be killed"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # kcoder and whatever it runs, at once
    finally:
        proc.wait()
    first = results.read_text().splitlines()
    assert len(first) == 1, first  # killed after the first result, before the others finished
    proc2 = run_kcoder("suite", "--resume", str(out), "--backend", "pool", "--workers", "1")
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    assert "resuming: 1 of 3 problems already have a result" in proc2.stdout
    lines = results.read_text().splitlines()
    assert lines[0] == first[0] and len(lines) == 3  # the finished problem was not run again
    assert sorted(json.loads(line)["name"] for line in lines) == NAMES
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["problems"] == 3 and summary["correct"] == 2
    # The results log kept beside it (--results, taken up again by --resume): a row per verdict,
    # with the device as the verdict names it.
    from kcoder.hostinfo import cpu_model

    kept = [json.loads(line) for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert [r["name"] for r in kept] == [json.loads(line)["name"] for line in lines]
    assert {r["device_name"] for r in kept} == {cpu_model()} and all(r["commit"] for r in kept)
    assert {r["status"] for r in kept} == {"accepted", "rejected"} and kept[0]["options"]["stop_after"] == "verify"


def test_bad_problem_set_is_one_line_naming_it(tmp_path):
    proc = run_kcoder("suite", str(tmp_path / "nowhere"), "--device", "cpu", "--backend", "pool")
    assert proc.returncode == 2
    assert "nowhere: no such file or folder" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_kcoder("suite", "--resume", str(tmp_path), "--backend", "pool")
    assert proc.returncode == 2 and "not a suite folder to resume" in proc.stderr


def test_optimize_mode_runs_the_agent_per_problem_and_keeps_its_best_kernel(tmp_path, scripted):
    from agent.llm_server import text_tool_reply

    good = testlib_candidate("return _ext.scale_add_relu(x, y, self.scale)")
    server = scripted([
        text_tool_reply("One fused loop.", "write_file", path="model_new.py", content=good),
        text_tool_reply("Measure it.", "benchmark"),
        text_tool_reply("Done.", "finish"),
    ])
    problem = tmp_path / "scale_add.py"
    shutil.copyfile(PROBLEMS / "scale_add.py", problem)
    out = tmp_path / "out"
    proc = run_kcoder("suite", str(problem), "--mode", "optimize", "--model", "openai/scripted", "--api-base",
                      server.base_url, "--device", "cpu", "--backend", "pool", "--no-compile", "--budget", "0.3",
                      "--max-turns", "4", "--out", str(out), "--json", env={"KCODER_API_KEY": "test"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["mode"] == "optimize" and summary["correct"] == 1 and summary["problems"] == 1
    record = json.loads((out / "results.jsonl").read_text())
    assert record["status"] == "accepted" and record["turns"] == 3 and record["verdict"]["speedup_vs_eager"] > 0
    assert record["reference"]["eager_us"] > 0  # the preflight ran (eager only: --no-compile)
    assert (out / "solutions" / "scale_add.py").read_text() == good
    assert len(server.requests) == 3
