"""`kcoder suite` and the speed of light on a GPU machine (marker `gpu`): the examples' CUDA
solutions over every visible GPU (one evaluation per GPU at a time), each verdict with its SOL
and shares of it that a real device can reach (at most slightly above the measured ceilings)."""

import json

import pytest
from helpers import ROOT

from kcoder.settings import Settings
from kcoder.suite.command import SuitePlan, run_suite, settings_fields

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_examples_suite_on_every_gpu(tmp_path):
    plan = SuitePlan(sources=[str(ROOT / "examples")], settings=settings_fields(Settings(device="cuda", budget=1.0)))
    summary = run_suite(plan, tmp_path / "suite", backend="pool")
    rows = json.loads((tmp_path / "suite" / "summary.json").read_text())["problems"]
    print("\nSUITE", json.dumps({k: summary[k] for k in ("correct_pct", "geomean_speedup_vs_eager",
                                                         "geomean_speedup_vs_compile", "mean_sol_fraction")}))
    for r in rows:
        print(f"SUITE {r['name']}: SOL {r['sol_us']:.1f} us, kernel {r['candidate_us']:.1f} us "
              f"({100 * r['candidate_sol_fraction']:.0f}%), compile {r['compile_us']:.1f} us "
              f"({100 * r['compile_sol_fraction']:.0f}%), {r['slot']}")
    assert summary["correct"] == summary["problems"] == 4
    slots = {r["slot"] for r in rows}
    assert len(slots) == min(4, torch.cuda.device_count())  # every GPU took a share
    for r in rows:
        assert 0 < r["candidate_sol_fraction"] <= 1.3 and 0 < r["compile_sol_fraction"] <= 1.3, r
