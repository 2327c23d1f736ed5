"""The judge's clock on the GPU (issues 27, 40; marker `gpu`). An honest candidate whose calls
spend far longer on the host than its kernel takes on the device (the cuDNN/cuBLAS + epilogue
shape) is accepted and its figure is its device time (its batch is queued behind the gate, so
the host's launches stay outside the clock); a candidate that reports a third of its device
time, with honest output, is refused, whether its calls are device-bound or host-bound.

The under-reporting attack (tests/sources.py:UNDER_REPORT_3X) needs static_checks=False: the
static checks refuse its import of kcoder; this tests the layer behind them.
"""

import re
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options
from sources import UNDER_REPORT_3X, cuda_candidate_source

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

OUTER_CLOCK = "the judge's own clock measured at least"
BUSY_REPS = 100_000  # dependent steps per element: about a millisecond on an H100 (512K elements)


def _host_work(seconds: float) -> str:
    """Python that keeps the host busy for about `seconds` per call (a library's per-call setup)."""
    started, steps = time.perf_counter(), 1_000_000
    for _ in range(steps):
        pass
    per_step = (time.perf_counter() - started) / steps
    return f"for _ in range({max(1, int(seconds / per_step))}):\n    pass\n"


def _eval(tmp_path: Path, forward: str, header: str = "", **options):
    from kcoder.evaluate import evaluate

    source = cuda_candidate_source(forward)
    if header:
        source = source.replace("\nclass ModelNew", header + "\n\nclass ModelNew", 1)
    path = tmp_path / "candidate.py"
    path.write_text(source)
    return evaluate(PROBLEMS / "scale_add.py", path, fast_options(device="cuda", compile_baseline=False, **options))


def _clock_note(verdict) -> tuple[str, float, float]:
    note = next(n for n in verdict.notes if n.startswith("judge's clock:"))
    judged, claimed = (float(x) for x in re.search(
        r"judge's clock: ([\d.]+) us per call .*reported ([\d.]+) us per call", note).groups())
    return note, judged, claimed


def test_honest_host_bound_candidate_accepted(tmp_path):
    """~0.5 ms of host work per call before a kernel of a few us: its figure is the device's time."""
    verdict = _eval(tmp_path, _host_work(500e-6) + "return _ext.scale_add_relu(x, y, self.scale)")
    assert verdict.correct and verdict.stage == "done", verdict.reason
    note, judged, claimed = _clock_note(verdict)
    print(f"\nOUTER CLOCK honest host-bound: {note}")
    assert "host was in the loop" not in note, note
    assert judged < 100, f"the host's 500 us per call reached the judge's figure: {note}"


def test_a_third_of_the_device_time_reported_is_rejected(tmp_path):
    """The busy kernel reported truly is accepted; reported at a third it is refused, with the
    host idle (device-bound) and with twice its device time of host work per call (host-bound)."""
    busy = f"return _ext.busy_scale_add_relu(x, y, self.scale, {BUSY_REPS})"
    honest = _eval(tmp_path, busy)
    assert honest.correct and honest.stage == "done", honest.reason
    print(f"\nOUTER CLOCK busy kernel, honest: {honest.candidate_us:.1f} us; {_clock_note(honest)[0]}")
    device_s = honest.candidate_us * 1e-6
    for label, forward in (("device-bound", busy), ("host-bound", _host_work(2 * device_s) + busy)):
        verdict = _eval(tmp_path, forward, header=UNDER_REPORT_3X, static_checks=False)
        print(f"OUTER CLOCK under-report 3x, {label}: {verdict.reason}")
        assert not verdict.correct and verdict.reward == -1 and verdict.stage == "timing", verdict.reason
        assert OUTER_CLOCK in verdict.reason, verdict.reason


def test_a_candidate_that_waits_for_the_gpu_in_each_call_is_timed_with_its_host(tmp_path):
    """A device synchronize inside forward (common in hand-written kernels' error checks): its
    batches cannot be queued behind the gate, so the judge opens it after QUEUE_WAIT_S once and
    times the rest with the host in the loop; accepted, said so, and in seconds, not minutes."""
    started = time.monotonic()
    verdict = _eval(tmp_path, "out = _ext.scale_add_relu(x, y, self.scale)\ntorch.cuda.synchronize()\nreturn out",
                    static_checks=False)
    seconds = time.monotonic() - started
    assert verdict.correct and verdict.stage == "done", verdict.reason
    note, judged, claimed = _clock_note(verdict)
    print(f"\nOUTER CLOCK synchronizing candidate: {note} ({seconds:.0f} s)")
    assert "host was in the loop" in note, note
    assert seconds < 90, f"a verdict of {seconds:.0f} s: every batch waited for the gate"
