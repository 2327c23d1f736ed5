"""The judge's own clock on the cpu target, end to end (issue 40): the verdict's figure is the
judge's, not the candidate's process's; a process that reports a third of its time is refused;
harness code replaced in place (same function object, new code) is seen; an output computed only
at the next call (after its own was read) is a wrong answer; calls skipped where the harness is
recognised are caught by the drawn checks. (Issue 45's arena batches: test_arena_batches.py.)

The attacks run with static_checks=False (the static checks refuse their imports of kcoder and
of sys): they test the layers behind them. Working extensions come from tests/sources.py:TESTLIB_CPP.
"""

import re

import pytest
from sources import UNDER_REPORT_3X, candidate_source

pytestmark = pytest.mark.slow

HONEST_FORWARD = "return _ext.scale_add_relu(x, y, self.scale)"
TIMED = dict(compile_baseline=False)

# Clock.call's code replaced in place while the candidate is imported: its id() is unchanged.
CODE_REPLACED = '''
import kcoder.evaluate.harness.timing as _timing

def _fast(self, fn, inputs):
    out = fn(*inputs)
    return out, lambda: 1.0

_timing.Clock.call.__code__ = _fast.__code__
'''

# Recognises the judge's batches from the Python stack and computes each output only at the next
# call (after the commitment was taken); honest everywhere else.
DEFERRED = '''
import sys

def _in_batch():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename.endswith(("arena.py", "batchrun.py")):
            return True
        f = f.f_back
    return False
'''
DEFERRED_FORWARD = '''
if not _in_batch():
    return _ext.scale_add_relu(x, y, self.scale)
pending = getattr(self, "pending", None)
if pending is not None:
    pending[0].copy_(_ext.scale_add_relu(pending[1], pending[2], self.scale))
out = torch.empty_like(x)
self.pending = (out, x.clone(), y.clone())
return out
'''

# In the judge's batches, returns zeros (no work) except when... never: the drawn check sees it.
SKIPPED_FORWARD = '''
if not _in_batch():
    return _ext.scale_add_relu(x, y, self.scale)
return torch.zeros_like(x)
'''


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One OpenMP thread in every process (the sandbox passes OMP_NUM_THREADS on): on a loaded
    runner a parallel region waits milliseconds for its threads."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_the_verdicts_figure_is_the_judges_clock(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD), **TIMED)
    assert verdict.correct and verdict.stage == "done" and verdict.reward >= 1, verdict.reason
    note = next(n for n in verdict.notes if n.startswith("judge's clock:"))
    judged = float(re.search(r"judge's clock: ([\d.]+) us per call", note).group(1))
    assert verdict.candidate_us == pytest.approx(judged, abs=0.06), (verdict.candidate_us, note)
    assert "judge_clock" in verdict.seconds and verdict.timing_rounds >= 5


def test_a_third_of_the_time_reported_changes_nothing(evaluate_candidate):
    """The honest kernel, every in-process figure a third of the truth: the verdict's figure is the
    judge's clock, near the truth, and a note names the gap (on the cpu target a gap is no evidence:
    the host is the device; on the GPU it is a refusal, tests/gpu/test_outer_clock_gpu.py)."""
    honest = evaluate_candidate(candidate_source(HONEST_FORWARD), **TIMED)
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD, header=UNDER_REPORT_3X), static_checks=False,
                                 **TIMED)
    assert honest.correct and verdict.correct, (honest.reason, verdict.reason)
    reported = float(re.search(r"reported ([\d.]+) us per call", next(
        n for n in verdict.notes if n.startswith("judge's clock:"))).group(1))
    assert verdict.candidate_us > 2 * reported, (verdict.candidate_us, reported)
    assert verdict.candidate_us > 0.5 * honest.candidate_us, (verdict.candidate_us, honest.candidate_us)


def test_harness_code_replaced_in_place_is_seen(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD, header=CODE_REPLACED), static_checks=False,
                                 stop_after="verify")
    assert not verdict.correct and verdict.reward == -1, verdict.reason
    assert "timing or harness functions were replaced" in verdict.reason, verdict.reason


def test_outputs_written_after_the_clock_stopped_break_their_commitment(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(DEFERRED_FORWARD, header=DEFERRED), static_checks=False, **TIMED)
    assert not verdict.correct and verdict.reward == -1 and verdict.stage == "timing", verdict.reason
    assert "committed to before the judge's clock stopped" in verdict.reason or (
        "of a batch" in verdict.reason and "wrong answer" in verdict.reason), verdict.reason


def test_work_skipped_in_the_judges_batches_is_caught(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(SKIPPED_FORWARD, header=DEFERRED), static_checks=False, **TIMED)
    assert not verdict.correct and verdict.reward == -1 and verdict.stage == "timing", verdict.reason
    assert "of a batch of" in verdict.reason and "wrong answer" in verdict.reason, verdict.reason
