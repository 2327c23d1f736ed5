"""Baselines measured once (evaluate/basecache.py, basetimer.py) and the stage times of a
verdict (evaluate/stagetimes.py): a cached entry is reused only for the same problem, device,
torch version and precision, and a close verdict times the baselines again."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options
from sources import candidate_source

from kcoder.evaluate import basecache
from kcoder.evaluate.basetimer import Baselines
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.stagetimes import CANDIDATE_STAMPS, StageClock
from kcoder.verdict import Verdict

SOL = {"sol_us": 10.0, "sol_bound": "memory", "sol_ceilings": "test", "flops": 0.0, "min_bytes": 1000}


@pytest.fixture(autouse=True)
def reuse(monkeypatch):
    monkeypatch.delenv(basecache.FRESH_ENV, raising=False)  # conftest turns reuse off for other tests


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))


def _times(center: float, n: int = 20, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + 0.01 * rng.uniform(-1, 1)) for _ in range(n)]


class FakeJudge:
    """What Baselines asks of the judge; the reference process answers with fixed times and
    counts its baseline requests."""

    def __init__(self, problem: Path, torch_version: str = "2.13.0", device_name: str = "cpu X",
                 precision: str = "strict", options: EvalOptions | None = None) -> None:
        self.problem = problem
        self.options = options or EvalOptions(precision=precision)
        self.verdict = Verdict(torch_version=torch_version, device_name=device_name)
        self.stages = StageClock()
        self.requests: list[str] = []
        self.eager_us = 100.0

    def seed(self) -> int:
        return 1

    def share_s(self) -> float:
        return 1.0

    def ask_reference(self, limit_s, stage, op, **request):
        self.requests.append(op)
        assert op == "sol", op
        return dict(SOL)

    def time_baselines(self, deadline, samples, calibration):
        """The judge's clock over the reference process's batches (judgetiming.baseline_figures)."""
        from kcoder.evaluate.judgeclock import Calibration

        self.requests.append("baselines")
        self.stages.add("baselines_eager", 0.5)
        self.stages.add("baselines_compile", 2.0)
        return {"eager": _times(self.eager_us, 10), "compile": _times(80.0, 10)}, calibration or Calibration(
            1e-3, 1e-5, 1e-5)


def _evaluate(judge: FakeJudge, candidate_us: float) -> dict[str, list[float]]:
    base = Baselines(judge)
    base.first(time.monotonic() + 60)
    return base.last(time.monotonic() + 60, _times(candidate_us))


@pytest.fixture
def problem(tmp_path, private_cache) -> Path:
    path = tmp_path / "scale_add.py"
    shutil.copyfile(PROBLEMS / "scale_add.py", path)
    return path


def test_second_evaluation_reuses_the_baselines(problem):
    first = FakeJudge(problem)
    _evaluate(first, candidate_us=50.0)  # 2x faster than both: the reward is not in doubt
    assert first.requests == ["baselines", "sol", "baselines"]
    assert first.stages.spent["baselines_compile"] == pytest.approx(4.0)
    second = FakeJudge(problem)
    second.eager_us = 1e6  # a reference process would now answer differently: it must not be asked
    samples = _evaluate(second, candidate_us=50.0)
    assert second.requests == []
    assert max(samples["eager"]) < 200.0
    assert any("reused" in note for note in second.verdict.notes)


@pytest.mark.parametrize("change", ["problem", "device", "torch", "precision"])
def test_a_changed_key_measures_again(problem, change):
    _evaluate(FakeJudge(problem), candidate_us=50.0)
    if change == "problem":
        problem.write_text(problem.read_text() + "\n# edited\n")
    judge = FakeJudge(problem, device_name="NVIDIA H100" if change == "device" else "cpu X",
                      torch_version="2.14.1" if change == "torch" else "2.13.0",
                      precision="relaxed" if change == "precision" else "strict")
    _evaluate(judge, candidate_us=50.0)
    assert judge.requests == ["baselines", "sol", "baselines"]
    assert not any("reused" in note for note in judge.verdict.notes)


def test_a_close_verdict_times_the_baselines_again(problem):
    _evaluate(FakeJudge(problem), candidate_us=50.0)
    judge = FakeJudge(problem)
    _evaluate(judge, candidate_us=100.0 / 1.05)  # right at the margin vs eager
    assert judge.requests == ["baselines", "baselines"]  # fresh halves; the cached SOL stands
    assert any("close to the reward's margin" in note for note in judge.verdict.notes)


def test_fresh_baselines_on_request(problem, monkeypatch):
    _evaluate(FakeJudge(problem), candidate_us=50.0)
    monkeypatch.setenv(basecache.FRESH_ENV, "1")
    judge = FakeJudge(problem)
    _evaluate(judge, candidate_us=50.0)
    assert judge.requests == ["baselines", "sol", "baselines"]


def test_stale_or_forged_entries_are_ignored(private_cache):
    key = basecache.baseline_key("abc", "cpu X", "2.13.0", EvalOptions())
    basecache.save_baselines(key, {"eager": [1.0, 2.0], "compile": [1.0, 2.0]}, SOL)
    assert basecache.load_baselines(key) is not None
    assert basecache.load_baselines(key, now=time.time() + basecache.MAX_AGE_S + 10) is None
    path = next(basecache.cache_dir().glob("*.json"))
    path.write_text(path.read_text().replace("[1.0, 2.0]", "[-1.0, 2.0]", 1))
    assert basecache.load_baselines(key) is None
    path.write_text("not json")
    assert basecache.load_baselines(key) is None


def test_stage_clock_names_requests_and_clamps_stamps():
    clock = StageClock()
    clock.add_request("reference", "check", "verify", 0.5)
    clock.add_request("reference", "check", "timing", 0.25)
    clock.add_request("candidate", "batch", "timing", 0.125)
    spawned = 1000.0
    stamps = {"main": 1000.5, "torch": 1002.0, "imported": 1010.0, "init": 1010.0, "built": 1011.0}
    clock.add_stamps(spawned, stamps, CANDIDATE_STAMPS, wall_s=12.0, compile_s=7.0)
    clock.add_stamps(spawned, {"main": 5000.0}, (("main", "reference_process_start"),), wall_s=12.0)  # beyond the wall
    seconds: dict[str, float] = {"build": 9.0}
    clock.into(seconds)
    assert seconds == {"build": 9.0, "reference_outputs": 0.5, "audits": 0.25, "judge_clock": 0.125,
                       "candidate_process_start": 0.5, "candidate_torch_import": 1.5, "candidate_compile": 7.0,
                       "candidate_import": 1.0, "candidate_init": 1.0}
    assert list(seconds)[1:5] == ["candidate_process_start", "candidate_torch_import", "candidate_compile",
                                  "candidate_import"]


@pytest.mark.slow
def test_evaluations_reuse_baselines_and_report_stage_times(write_candidate, tmp_path):
    from kcoder.evaluate import evaluate

    # the session's build cache (TESTLIB is built once), a problem of this test's own (a nonce:
    # no earlier run's baselines match it)
    problem = tmp_path / "scale_add.py"
    problem.write_text((PROBLEMS / "scale_add.py").read_text() + f"\n# {time.time_ns()}\n")
    good = write_candidate(candidate_source("return _ext.scale_add_relu(x, y, self.scale)"))
    first = evaluate(problem, good, fast_options())
    second = evaluate(problem, good, fast_options())
    assert first.correct and second.correct, (first.reason, second.reason)
    assert not any("reused" in n for n in first.notes)
    assert any("reused" in n for n in second.notes), second.notes
    for stage in ("reference_torch_import", "candidate_torch_import", "reference_outputs", "baselines_eager",
                  "baselines_compile", "sol", "candidate_timing", "audits", "judge_clock", "total"):
        assert first.seconds.get(stage, 0) > 0, (stage, first.seconds)
    assert first.seconds["baselines_eager"] + first.seconds["baselines_compile"] <= first.seconds["timing"]
    assert first.seconds["timing"] < first.seconds["total"]
    # nothing is timed between verification and the candidate's rounds: its process goes on
    assert "candidate_restart" in first.seconds and "candidate_restart" not in second.seconds


def test_the_sandbox_cannot_change_cached_baselines(tmp_path, private_cache):
    import subprocess

    from kcoder.evaluate.sandbox import Box, bwrap_argv, bwrap_usable
    from kcoder.paths import cache_root

    if not bwrap_usable():
        pytest.skip("bwrap cannot run here")
    box = Box.create(tmp_path)
    own = cache_root() / "build" / "+own-test"  # the candidate's private build folder
    own.mkdir(parents=True, exist_ok=True)
    argv = bwrap_argv(box, "cpu", [], [own])
    judged, elsewhere = cache_root() / "baselines" / "planted.json", cache_root() / "planted.txt"
    (cache_root() / "baselines").mkdir(exist_ok=True)
    planted = subprocess.run(argv + ["sh", "-c", f"echo x > {judged}"], capture_output=True)
    cached = subprocess.run(argv + ["sh", "-c", f"echo x > {elsewhere}"], capture_output=True)
    built = subprocess.run(argv + ["sh", "-c", f"echo x > {own / 'planted.txt'}"], capture_output=True)
    assert built.returncode == 0 and (own / "planted.txt").exists(), built.stderr  # its own builds only
    assert planted.returncode != 0 and not judged.exists()
    assert not elsewhere.exists(), cached.stderr  # (made, if at all, in the sandbox's private tmpfs)


@pytest.mark.slow
def test_the_preflights_measurement_serves_the_first_verdict(problem):
    import torch

    from kcoder.evaluate.baseline import measure_reference
    from kcoder.hostinfo import cpu_model

    options = fast_options(compile_baseline=False)
    figures = measure_reference(problem, options)
    judge = FakeJudge(problem, torch_version=torch.__version__, device_name=cpu_model(), options=options)
    judge.eager_us = 1e6  # must not be asked
    base = Baselines(judge)
    base.first(time.monotonic() + 60)
    assert judge.requests == []
    assert base.sol["sol_us"] == pytest.approx(figures.sol_us)
