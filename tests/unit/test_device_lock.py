"""One device, one timer (kcoder/devicelock.py): the per-device lock between threads and
processes, two `kcoder eval` runs started together, and a tune run's build-ahead.

Every interval comes from $KCODER_DEVICE_TRACE, which the lock (held intervals), the
evaluator (child starts) and the runner (the timing stage) append to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS, ROOT, fast_options
from sources import candidate_source, tunable_candidate

from kcoder.devicelock import TRACE_ENV, DeviceTurn, device_keys


def _trace(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _overlaps(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def _assert_disjoint(intervals: list[dict]) -> None:
    for i, a in enumerate(intervals):
        for b in intervals[i + 1:]:
            assert not _overlaps(a, b), f"two device steps at once: {a} and {b}"


@pytest.fixture
def trace(tmp_path, monkeypatch):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(path))
    return path


def test_keys_name_the_gpu_in_use_or_every_core(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert device_keys("cuda") == ["cuda-3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_keys("cuda") == ["cuda-0"]
    assert device_keys("cpu") == [f"cpu-{c:04d}" for c in sorted(os.sched_getaffinity(0))]


def test_threads_take_turns_and_a_holder_may_nest():
    waited: list[str] = []
    order: list[str] = []
    first = DeviceTurn("cpu", "first")
    first.claim()
    with DeviceTurn("cpu", "nested"):  # the same thread again: re-entrant, no deadlock
        order.append("nested")

    def second() -> None:
        with DeviceTurn("cpu", "second", on_wait=waited.append):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.5)
    assert order == ["nested"]  # the other thread is still waiting
    order.append("first released")
    first.release()
    thread.join(10)
    assert order == ["nested", "first released", "second"]
    assert len(waited) == 1 and "waiting for the cpu device" in waited[0]


HOLDER = """
import sys, time
from kcoder.devicelock import DeviceTurn
with DeviceTurn("cpu", sys.argv[1]):
    time.sleep(0.4)
"""


def test_processes_never_hold_one_device_at_once(trace):
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, f"holder{i}"], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for i in range(3)]
    assert all(p.wait(60) == 0 for p in procs)
    held = [e for e in _trace(trace) if e["kind"] == "held"]
    assert sorted(e["what"] for e in held) == ["holder0", "holder1", "holder2"]
    assert len({e["pid"] for e in held}) == 3
    _assert_disjoint(held)


GOOD = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")


@pytest.mark.slow
def test_two_evals_started_together_never_time_at_once(trace, tmp_path):
    candidate = tmp_path / "model_new.py"
    candidate.write_text(GOOD)
    cmd = [sys.executable, "-m", "kcoder", "eval", str(PROBLEMS / "scale_add.py"), str(candidate), "--device", "cpu",
           "--budget", "0.5", "--no-compile", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode in (0, 1), err[-2000:]
        assert json.loads(out)["candidate_us"], out[-2000:]  # both reached timing
    events = _trace(trace)
    timing = [e for e in events if e["kind"] == "timing"]
    assert len({e["pid"] for e in timing}) == 2 and all(e["held"] for e in timing)
    _assert_disjoint(timing)
    _assert_disjoint([e for e in events if e["kind"] == "held"])
    # every child process started while its evaluation held the device
    starts = [e for e in events if e["kind"] == "start"]
    assert {e["process"] for e in starts} == {"reference", "candidate"} and all(e["held"] for e in starts)


@pytest.mark.slow
def test_tune_timed_points_never_overlap_the_build_ahead(trace, tmp_path):
    from kcoder.tune.engine import TuneOptions, tune

    candidate = tmp_path / "cand.py"
    candidate.write_text(tunable_candidate())
    topts = TuneOptions(strategy="exhaustive", jobs=2, use_cache=False, plain_check=False, profile_top=0)
    result = tune(PROBLEMS / "scale_add.py", candidate, fast_options(compile_baseline=False), topts,
                  tmp_path / "work")
    assert result.evaluated == 4 and result.best is not None
    events = _trace(trace)
    held = [e for e in events if e["kind"] == "held"]
    builds = [e for e in held if e["what"] == "evaluate compile"]
    timing = [e for e in events if e["kind"] == "timing"]
    assert len(builds) == 4 and len(timing) >= 1 and all(e["held"] for e in timing)
    for t in timing:  # a timed point never shares the device with a build ahead (or anything else)
        assert not any(_overlaps(t, b) for b in builds), (t, builds)
    _assert_disjoint(held)
    # the build ahead is host work: no reference process, only the candidate's compile-only process
    starts = [e for e in events if e["kind"] == "start" and e["what"] == "evaluate compile"]
    assert {e["process"] for e in starts} == {"candidate"}
