"""Suite records carry verdicts as JSON and are read back as Verdict objects (issue 27, item 5):
the figures come through, and a field this kcoder does not know fails loudly instead of
reading as missing."""

import pytest

from kcoder.suite.metrics import row, verdict_of
from kcoder.suite.progress import result_line
from kcoder.verdict import Verdict


def _record(verdict: dict | None) -> dict:
    return {"name": "softmax", "status": "accepted" if verdict else "missing", "verdict": verdict,
            "seconds": 3.0, "slot": "cpu:0", "reason": "" if verdict else "no solution file matched"}


def test_a_verdict_travels_as_json_and_reads_back_as_figures():
    v = Verdict(compiled=True, correct=True, reward=3, candidate_us=12.5, speedup_vs_eager=2.0,
                speedup_vs_compile=1.5, candidate_sol_fraction=0.8, device_name="H100")
    record = _record(v.to_dict())
    assert verdict_of(record) == v
    r = row(record)
    assert (r["correct"], r["reward"], r["candidate_us"], r["speedup_vs_compile"]) == (True, 3, 12.5, 1.5)
    assert result_line(record).startswith("✓ softmax: accepted, 2.00x vs eager, 1.50x vs compile, 80% of SOL")


def test_a_renamed_field_fails_loudly():
    data = Verdict(correct=True).to_dict()
    data["cand_us"] = data.pop("candidate_us")
    with pytest.raises(ValueError, match="cand_us"):
        row(_record(data))


def test_no_verdict_is_no_figures():
    r = row(_record(None))
    assert (r["compiled"], r["correct"], r["reward"], r["candidate_us"]) == (False, False, None, None)
    assert result_line(_record(None)).startswith("✗ softmax: missing")
