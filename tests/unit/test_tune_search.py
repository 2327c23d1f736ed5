"""The tuning engine and its strategies, with a stand-in judge (no builds): budgets, invalid
points, the cache, the outputs. tests/integration-style runs with real builds are in
tests/test_tune_cpu.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import PROBLEMS, run_kcoder

from kcoder.evaluate.options import EvalOptions
from kcoder.tune.engine import TuneOptions, tune
from kcoder.tune.report import importance, markdown_table, summary_lines, write_outputs
from kcoder.tune.space import load_space
from kcoder.tune.strategies import auto_choice
from kcoder.verdict import Verdict

PROBLEM = PROBLEMS / "scale_add.py"
CANDIDATE = '''import torch
TUNE = {"BLOCK": [32, 64, 128, 256, 512, 1024], "VEC": [1, 2, 4, 8], "UNROLL": [1, 2, 4]}
CONFIG = {"BLOCK": 128, "VEC": 1, "UNROLL": 1}
TUNE_CONSTRAINTS = ["BLOCK * VEC <= 4096"]
'''


def model_time(cfg: dict) -> float:
    """A smooth landscape with one optimum (BLOCK 256, VEC 4, UNROLL 2): 100 us."""
    return (100 + 5 * (math.log2(cfg["BLOCK"]) - 8) ** 2 + 8 * (math.log2(cfg["VEC"]) - 2) ** 2
            + 3 * (cfg["UNROLL"] - 2) ** 2)


def wrong(cfg: dict) -> bool:
    return cfg["VEC"] == 4 and cfg["UNROLL"] == 2 and cfg["BLOCK"] == 256  # the "optimum" is incorrect


class FakeJudge:
    """Times a point by model_time; `wrong` points fail verification. Records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict, str, bool]] = []

    def __call__(self, problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
        cfg = load_space(candidate).current
        self.calls.append((cfg, options.stop_after, options.fast_build))
        v = Verdict(problem=str(problem), candidate=str(candidate), device=options.device, compiled=True)
        if options.stop_after == "compile":
            v.reason, v.stage = "compiled", "build"
            return v
        if wrong(cfg):
            return v.fail("verify", "wrong answer on input set 1 of 5")
        v.correct, v.status, v.reward, v.stage = True, "accepted", 1, "done"
        v.candidate_us, v.eager_us = model_time(cfg), 400.0
        v.speedup_vs_eager = 400.0 / v.candidate_us
        return v

    def timed(self) -> list[dict]:
        return [c for c, stage, fast in self.calls if stage == "timing" and fast]


@pytest.fixture
def candidate(tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))  # a private tuning cache
    path = tmp_path / "cand.py"
    path.write_text(CANDIDATE)
    return path


def run(candidate: Path, tmp_path: Path, judge: FakeJudge | None = None, **kw):
    judge = judge or FakeJudge()
    topts = TuneOptions(**{"jobs": 1, **kw})
    result = tune(PROBLEM, candidate, EvalOptions(device="cpu"), topts, tmp_path / "out", evaluator=judge)
    return result, judge


def test_exhaustive_finds_the_best_valid_point(candidate, tmp_path):
    result, judge = run(candidate, tmp_path, strategy="exhaustive")
    timed = judge.timed()
    assert timed[0] == {"BLOCK": 128, "VEC": 1, "UNROLL": 1}  # the hand-picked point first
    assert all(c["BLOCK"] * c["VEC"] <= 4096 for c in timed)  # refused points never reach the judge
    assert len(timed) == 72 - 3  # BLOCK 1024 with VEC 8, for each UNROLL: refused
    refused = [p for p in result.points if p.status == "constraint"]
    assert {(p.config["BLOCK"], p.config["VEC"]) for p in refused} == {(1024, 8)}
    bad = [p for p in result.points if p.status == "incorrect"]
    assert [p.config for p in bad] == [{"BLOCK": 256, "VEC": 4, "UNROLL": 2}]
    assert result.best.config != bad[0].config and result.best.time_us == 103.0  # best *valid*
    assert result.stopped == "space exhausted" and result.hand_picked.time_us == model_time(timed[0])
    # the best file, judged once more as plain load_inline builds it
    assert [c for c, stage, fast in judge.calls if not fast] == [result.best.config]
    assert load_space(candidate).current == {"BLOCK": 128, "VEC": 1, "UNROLL": 1}  # the user's file: untouched


@pytest.mark.parametrize("strategy", ["tpe", "evolution"])
def test_guided_strategies_keep_the_budget_and_are_seeded(candidate, tmp_path, strategy):
    first, judge = run(candidate, tmp_path, strategy=strategy, trials=18, use_cache=False, plain_check=False)
    assert len(judge.timed()) <= 18 and first.evaluated == len(judge.timed())
    assert judge.timed()[0] == {"BLOCK": 128, "VEC": 1, "UNROLL": 1}
    assert first.best.time_us <= first.hand_picked.time_us
    assert all(p.status != "incorrect" or p is not first.best for p in first.points)
    again, _ = run(candidate, tmp_path, strategy=strategy, trials=18, use_cache=False, plain_check=False)
    assert [p.config for p in again.points] == [p.config for p in first.points]


def test_cache_short_circuits_a_second_run(candidate, tmp_path):
    first, _ = run(candidate, tmp_path, strategy="tpe", trials=10)
    second, judge = run(candidate, tmp_path, strategy="tpe", trials=10)
    assert judge.calls == []  # nothing judged again, not even the final check
    assert second.best.config == first.best.config and second.final_cached and second.final.correct
    assert all(p.cached for p in second.points if p.status != "constraint")
    # narrowing the space keeps the kernel's key: measured points are reused
    candidate.write_text(CANDIDATE.replace("[32, 64, 128, 256, 512, 1024]", "[128, 256]"))
    third, judge = run(candidate, tmp_path, strategy="exhaustive")
    assert len(judge.timed()) == len(third.points) - sum(p.cached for p in third.points)


def test_time_budget_and_auto(candidate, tmp_path):
    result, judge = run(candidate, tmp_path, strategy="exhaustive", time_s=1e-9, plain_check=False)
    assert result.stopped == "time budget" and judge.calls == []
    space = load_space(candidate)
    assert auto_choice(space, None) == "tpe" and auto_choice(space, 72) == "exhaustive"  # 72 points > 64


def test_points_are_built_ahead_in_parallel(candidate, tmp_path):
    candidate.write_text(CANDIDATE.replace("[32, 64, 128, 256, 512, 1024]", "[128]").replace(
        "[1, 2, 4, 8]", "[1, 2]"))
    result, judge = run(candidate, tmp_path, strategy="exhaustive", jobs=3, plain_check=False)
    stages = [stage for _, stage, _ in judge.calls]
    assert stages[:3] == ["compile"] * 3 and stages.count("timing") == 6  # cpu: builds before timing
    assert len(result.points) == 6


def test_outputs_table_json_plot(candidate, tmp_path):
    result, _ = run(candidate, tmp_path, strategy="exhaustive")
    paths = write_outputs(result, tmp_path / "out")
    table = paths["markdown"].read_text()
    assert "BLOCK=512 VEC=2 UNROLL=2" in table and "incorrect: wrong answer" in table
    assert "constraint: violates BLOCK * VEC <= 4096" in table
    data = json.loads(paths["json"].read_text())
    assert data["best"]["config"] == result.best.config and len(data["points"]) == 72
    assert set(data["importance"]) == {"BLOCK", "VEC", "UNROLL"}
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    short = markdown_table(result, limit=5)
    assert short.count("\n") == 5 + 2 and "more points in table.md" in short
    assert importance(result)["VEC"] > importance(result)["UNROLL"]


def test_cli_refuses_a_candidate_without_a_space(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\nCONFIG = {'A': 1}\n")
    proc = run_kcoder("tune", str(PROBLEM), str(plain), "--device", "cpu", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"].startswith(f"{plain}: declares no TUNE space")
    assert plain.read_text() == "import torch\nCONFIG = {'A': 1}\n"


def _fixture_kernels(name: str):
    from kcoder.profile.ncu_parse import parse_ncu

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
    return parse_ncu((fix / f"h200_{name}_raw.csv").read_text(), (fix / f"h200_{name}_details.csv").read_text())


def test_nsight_metrics_for_the_fastest_points(candidate, tmp_path):
    """On cuda the fastest points are profiled after the search (real ncu pages from the H200
    stand in for ncu here); the table shows occupancy, DRAM, SM and the top stall."""
    from types import SimpleNamespace

    from kcoder.tune.ncu import summarise

    candidate.write_text(CANDIDATE.replace("[32, 64, 128, 256, 512, 1024]", "[128, 256]"))
    profiled: list[Path] = []

    def profiler(problem: Path, file: Path):
        profiled.append(file)
        return SimpleNamespace(mode="ncu", kernels=_fixture_kernels("mse_loss"), messages=[], error=None)

    judge = FakeJudge()
    result = tune(PROBLEM, candidate, EvalOptions(device="cuda"),
                  TuneOptions(strategy="exhaustive", jobs=1, resources=False, plain_check=False, profile_top=2),
                  tmp_path / "out", evaluator=judge, profiler=profiler)
    fastest = sorted((p for p in result.points if p.valid), key=lambda p: p.time_us)
    assert [load_space(f).current for f in profiled] == [p.config for p in fastest[:2]]
    # two kernels (33.4 us and 2.8 us): weighted by duration, the long kernel dominates
    m = fastest[0].ncu
    assert m["kernels"] == 2 and 62 < m["occupancy_pct"] < 65.24 and m["top_stall"] == "long_scoreboard"
    assert m == summarise(_fixture_kernels("mse_loss")) and all(p.ncu is None for p in fastest[2:])
    table = markdown_table(result)
    assert "occ %" in table.splitlines()[0] and "long_scoreboard" in table.splitlines()[2]


def test_no_ncu_is_one_note_not_a_failure(candidate, tmp_path):
    from types import SimpleNamespace

    candidate.write_text(CANDIDATE.replace("[32, 64, 128, 256, 512, 1024]", "[128]"))
    calls = []

    def profiler(problem: Path, file: Path):
        calls.append(file)
        return SimpleNamespace(mode="timeline", kernels=[], error=None,
                               messages=["ncu not found (set --ncu or KCODER_NCU); using torch.profiler"])

    result = tune(PROBLEM, candidate, EvalOptions(device="cuda"),
                  TuneOptions(strategy="exhaustive", jobs=1, resources=False, plain_check=False),
                  tmp_path / "out", evaluator=FakeJudge(), profiler=profiler)
    assert len(calls) == 1 and result.best is not None and all(p.ncu is None for p in result.points)
    assert result.notes == ["no Nsight Compute metrics: ncu not found (set --ncu or KCODER_NCU); using torch.profiler"]
    assert "occ %" not in markdown_table(result) and result.notes[0] in summary_lines(result)
