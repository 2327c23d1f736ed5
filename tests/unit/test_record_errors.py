"""summary.record_errors: a verdict keeps its largest errors and the loosest rule any check needed."""

from kcoder.evaluate.summary import record_errors
from kcoder.verdict import Verdict

FLOAT32 = {"rtol": 1e-4, "norm_tol": 5e-5}
FLOAT64 = {"rtol": 1e-4, "norm_tol": 5e-5, "float64_factor": 4.0}


def test_the_float64_rule_once_needed_is_not_hidden_by_a_later_float32_check():
    v = Verdict()
    record_errors(v, {"max_abs_err": 0.5, "tolerance": FLOAT64})
    record_errors(v, {"max_abs_err": 0.1, "tolerance": FLOAT32})
    assert v.tolerance == FLOAT64 and v.max_abs_err == 0.5


def test_a_later_float64_check_replaces_the_float32_rule():
    v = Verdict()
    record_errors(v, {"tolerance": FLOAT32})
    assert v.tolerance == FLOAT32
    record_errors(v, {"tolerance": FLOAT64})
    record_errors(v, {})
    assert v.tolerance == FLOAT64
