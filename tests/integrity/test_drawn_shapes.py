"""Input sets at batch sizes the judge draws (issue 48; kcoder/evaluate/drawnshapes.py): one set
each at 1, a prime, half and double the problem's batch, drawn as the problem draws its inputs.
A candidate right only at the problem's own batch size is refused under --shapes strict (what
`kcoder optimize` asks) and noted under auto; a candidate that raises there is noted in both."""

import pytest
from sources import candidate_source

pytestmark = pytest.mark.slow

HONEST = "return _ext.scale_add_relu(x, y, self.scale)"
# right at scale_add's own 512 rows only: another batch gets another scale, silently
ONLY_ITS_OWN_BATCH = "return _ext.scale_add_relu(x, y, self.scale if x.shape[0] == 512 else 1.0)"
MADE_FOR_ITS_SHAPES = '''if x.shape[0] != 512:
    raise ValueError(f"made for x[512, 1024]; got {list(x.shape)}")
return _ext.scale_add_relu(x, y, self.scale)'''
SIZES = "1, 173, 256, 1024"  # scale_add draws 512 rows: 1, the prime after 512 // 3, half, double


def test_an_honest_kernel_is_right_at_every_drawn_batch_size(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(HONEST), stop_after="verify", shapes="strict")
    assert verdict.correct, verdict.reason
    assert verdict.shapes == f"right at 4 of 4 batch sizes the judge drew ({SIZES}; the problem's own is 512)"


def test_right_only_at_its_own_batch_size_is_refused_under_strict(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(ONLY_ITS_OWN_BATCH), stop_after="verify", shapes="strict")
    assert verdict.status == "rejected" and verdict.stage == "verify", verdict.reason
    assert verdict.reason.startswith("wrong answer at batch size 1 (the problem's own shapes were right)"), \
        verdict.reason


def test_right_only_at_its_own_batch_size_is_a_note_under_auto(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(ONLY_ITS_OWN_BATCH), stop_after="verify", shapes="auto")
    assert verdict.correct, verdict.reason
    assert verdict.shapes.startswith("right at 0 of 4 batch sizes the judge drew (none;")
    assert sum(n.startswith("at batch size ") and "wrong answer" in n for n in verdict.notes) == 4, verdict.notes


def test_a_kernel_that_says_it_is_made_for_its_shapes_is_not_refused(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(MADE_FOR_ITS_SHAPES), stop_after="verify", shapes="strict")
    assert verdict.correct, verdict.reason
    assert verdict.shapes.startswith("right at 0 of 4")
    assert any("at batch size 1: raised" in n and "made for x[512, 1024]; got [1, 1024]" in n
               for n in verdict.notes), verdict.notes


def test_off_by_default_for_a_plain_eval(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source(ONLY_ITS_OWN_BATCH), stop_after="verify")
    assert verdict.correct and verdict.shapes == "", verdict.reason
