"""The judge's outer clock on the cpu target, end to end (issue 27): a candidate that reports a
third of its time with honest output is rejected by it; an honest candidate whose kernel takes
microseconds behind a costly per-call harness step (tests/problems/many_dims.py) is not; and
the timing functions' identities are taken before the candidate's import.

The attacks run with static_checks=False (the static checks refuse their imports of kcoder):
they test the layers behind them. Working extensions come from tests/sources.py:TESTLIB_CPP.
"""

import re

import pytest
from sources import UNDER_REPORT_3X, candidate_source

pytestmark = pytest.mark.slow

OUTER_CLOCK = "the judge's own clock measured"
HONEST_FORWARD = "return _ext.scale_add_relu(x, y, self.scale)"
TIMED = dict(compile_baseline=False)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One OpenMP thread in every process (the sandbox passes OMP_NUM_THREADS on): on a loaded
    runner a parallel region over 256 elements waits milliseconds for its threads, and the
    kernel's time here should be the kernel's."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


# Clock.call itself replaced while the candidate is imported.
PATCHED_AT_IMPORT = '''
import kcoder.evaluate.timing as _timing

_real_call = _timing.Clock.call
_timing.Clock.call = lambda self, fn, inputs: (lambda r: (r[0], lambda: r[1]() / 3))(_real_call(self, fn, inputs))
'''


def test_a_third_of_the_time_reported_is_rejected(evaluate_candidate):
    """The honest kernel (right outputs everywhere), every timed call reported at a third of its
    measured time: the judge's clock sees three times the claim."""
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD, header=UNDER_REPORT_3X), static_checks=False,
                                 **TIMED)
    assert not verdict.correct and verdict.reward == -1 and verdict.stage == "timing", verdict.reason
    assert OUTER_CLOCK in verdict.reason, verdict.reason


def test_timer_replaced_while_imported_is_seen(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD, header=PATCHED_AT_IMPORT), static_checks=False,
                                 stop_after="verify")
    assert not verdict.correct and verdict.reward == -1, verdict.reason
    assert "timing or harness functions were replaced" in verdict.reason, verdict.reason


def test_honest_candidate_behind_a_costly_harness_step_is_not_accused(evaluate_candidate):
    """many_dims.py: each call of the judge's batch changes one element through a 56-coordinate
    index, far more work than the kernel's. The rule before issue 27 (batch less an empty round
    trip, against 3x the claim + 100 us) accused this candidate; the calibration batch explains it."""
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD), problem="many_dims.py", **TIMED)
    assert verdict.correct and verdict.stage == "done" and verdict.reward >= 1, verdict.reason
    note = next(n for n in verdict.notes if n.startswith("judge's clock:"))
    own, harness, claimed = (float(x) for x in re.search(
        r"judge's clock: ([\d.]+) us per call .* own ([\d.]+) us per call .*reported ([\d.]+) us", note).groups())
    assert own + harness > 3 * claimed + 100, f"the old rule would not have accused it: {note}"
