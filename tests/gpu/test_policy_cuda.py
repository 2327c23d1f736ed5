"""The built-in policy on the cuda target (marker `gpu`; never run in kcoder's CI, which has no
GPU): for each example and each pattern-family problem, the generated CUDA candidate must be
verified and timed by the evaluator, and its TUNE space must tune. Prints the speed-ups."""

from pathlib import Path

import pytest
from helpers import ROOT, fast_options

from kcoder.policy.driver import generate
from kcoder.settings import Settings

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FAMILIES = Path(__file__).parents[1] / "policy" / "problems"
PROBLEMS = sorted((ROOT / "examples").glob("*/model.py")) + [
    FAMILIES / "pointwise.py", FAMILIES / "reductions.py", FAMILIES / "reduction_layouts.py",
    FAMILIES / "linear_epilogue.py", FAMILIES / "pooling.py", FAMILIES / "scans.py", FAMILIES / "long_rows.py",
    FAMILIES / "scan_rows.py"]
ALLOW = ["gemm", "conv"]


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.parent.name if p.name == "model.py" else p.stem for p in PROBLEMS])
def test_policy_cuda_candidate_verified_and_timed(problem, tmp_path):
    from kcoder.evaluate import evaluate

    generated = generate(problem, Settings(device="cuda", allow=ALLOW), tmp_path / "work")
    assert generated.source is not None, generated.error
    candidate = tmp_path / "model_new.py"
    candidate.write_text(generated.source)
    verdict = evaluate(problem, candidate, fast_options(device="cuda", allow=ALLOW, timing_budget_s=1.0,
                                                        min_rounds=20))
    assert verdict.correct and verdict.stage == "done", verdict.reason
    print(f"\nPOLICY {problem.parent.name if problem.name == 'model.py' else problem.stem}: "
          f"{'; '.join(generated.kernels)}: kernel {verdict.candidate_us:.1f} us, "
          f"{verdict.speedup_vs_eager:.2f}x vs eager, {verdict.speedup_vs_compile:.2f}x vs compile")


def test_policy_cuda_space_tunes(tmp_path):
    from kcoder.tune.engine import TuneOptions, tune

    problem = ROOT / "examples" / "softmax_rows" / "model.py"
    generated = generate(problem, Settings(device="cuda"), tmp_path / "work")
    candidate = tmp_path / "model_new.py"
    candidate.write_text(generated.source or "")
    result = tune(problem, candidate, fast_options(device="cuda"), TuneOptions(trials=4, plain_check=False),
                  tmp_path / "tune")
    assert result.best is not None and sum(p.valid for p in result.points) >= 2
