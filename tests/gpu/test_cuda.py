"""CUDA target, on a GPU machine (marker `gpu`): examples accepted, crashes contained, and the
CUDA red team (hidden stream, kernel never launched, stale reference output) rejected."""

from pathlib import Path

import pytest
from helpers import PROBLEMS, ROOT, fast_options
from sources import cuda_candidate_source

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/solution_cuda.py"))


def _eval(path: Path, problem: Path, **options):
    from kcoder.evaluate import evaluate

    return evaluate(problem, path, fast_options(device="cuda", **options))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_cuda_solution_accepted(example):
    verdict = _eval(example / "solution_cuda.py", example / "model.py", timing_budget_s=1.0, min_rounds=20)
    assert verdict.correct and verdict.stage == "done", verdict.reason
    assert verdict.reward >= 1 and verdict.device_name
    print(f"\nEXAMPLE {example.name}: eager {verdict.eager_us:.1f} us, compile {verdict.compile_us:.1f} us, "
          f"kernel {verdict.candidate_us:.1f} us, {verdict.speedup_vs_eager:.2f}x vs eager, "
          f"{verdict.speedup_vs_compile:.2f}x vs compile, reward {verdict.reward}")


def _write(tmp_path: Path, body: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(cuda_candidate_source(body))
    return path


def test_illegal_address_then_good_kernel_in_one_run(tmp_path):
    problem = PROBLEMS / "scale_add.py"
    bad = _eval(_write(tmp_path, "return _ext.out_of_bounds(x, y, self.scale)", "bad.py"), problem)
    assert not bad.correct and "illegal memory access" in bad.reason, bad.reason
    good = _eval(_write(tmp_path, "return _ext.scale_add_relu(x, y, self.scale)", "good.py"), problem)
    assert good.correct and good.stage == "done", good.reason


def test_kernel_never_launched_rejected(tmp_path):
    verdict = _eval(_write(tmp_path, "return _ext.never_launched(x, y, self.scale)", "lazy.py"),
                    PROBLEMS / "scale_add.py")
    assert not verdict.correct and "NaN positions" in verdict.reason, verdict.reason


def test_stale_reference_output_rejected(tmp_path):
    # Honest through verification, then it stops writing its output and hopes the memory it
    # gets back still holds eager's answer for the same inputs. Outputs of a timing round
    # are all kept alive until the round is checked, so that memory is never handed out.
    source = cuda_candidate_source(
        "self.calls = getattr(self, 'calls', 0) + 1\n"
        "if self.calls > 6:\n    return _ext.never_launched(x, y, self.scale)\n"
        "return _ext.scale_add_relu(x, y, self.scale)")
    path = tmp_path / "stale.py"
    path.write_text(source)
    verdict = _eval(path, PROBLEMS / "scale_add.py", audit_every=0)
    assert not verdict.correct and verdict.stage == "timing", verdict.reason
    assert "wrong answer for its own inputs" in verdict.reason


def test_hidden_stream_work_rejected(tmp_path):
    verdict = _eval(_write(tmp_path, "return _ext.hidden_stream(x, y, self.scale)", "side.py"),
                    PROBLEMS / "scale_add.py")
    # the profiler's kernel time or the judge's own clock over back-to-back calls shows it
    assert not verdict.correct, verdict.reason
    assert "outside the timed stream" in verdict.reason or "judge's own clock" in verdict.reason, verdict.reason


def test_static_check_catches_plain_stream_creation(tmp_path):
    source = cuda_candidate_source("s = torch.cuda.Stream()\nreturn _ext.scale_add_relu(x, y, self.scale)")
    path = tmp_path / "stream.py"
    path.write_text(source)
    verdict = _eval(path, PROBLEMS / "scale_add.py")
    assert verdict.stage == "static" and "[stream]" in verdict.reason
