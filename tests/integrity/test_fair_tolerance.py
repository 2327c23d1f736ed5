"""The float64 rule end to end (issue 36): on a problem whose output cancels, a candidate that
sums in another order is accepted and the verdict names the rule; wrong answers are refused.
No build: the candidates call the GEMM library (--allow gemm) in other orders."""

def _candidate(body: str) -> str:
    return f"""import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return {body}
"""


REORDERED = _candidate("torch.addmm(torch.mm(a[:, :2048], b[:2048]), a[:, 2048:], b[2048:])")


def test_a_correct_summation_order_is_accepted_and_the_verdict_says_by_which_rule(evaluate_candidate):
    verdict = evaluate_candidate(REORDERED, problem="cancel_matmul.py", allow=["gemm"], audit_every=1, min_rounds=3,
                                 max_rounds=4, compile_baseline=False)
    assert verdict.correct and verdict.stage == "done", verdict.reason
    notes = [n for n in verdict.notes if n.startswith("tolerance: the float64 rule accepted")]
    assert len(notes) == 1, verdict.notes
    assert "input set 1 of 5" in notes[0] and "within 4x eager float32's own" in notes[0]
    accepted = int(notes[0].split("accepted ", 1)[1].split(" ", 1)[0])
    assert accepted >= 6  # 5 input sets and the timed outputs checked after them
    assert verdict.tolerance.get("float64_factor") == 4.0


def test_a_wrong_answer_is_refused_by_both_rules(evaluate_candidate):
    # 1% off where eager float32 is ~0.1% off (zeros and grosser errors: tests/unit/test_compare64.py)
    body = "torch.addmm(torch.zeros(64, 64), a, b, beta=0, alpha=1.01)"
    verdict = evaluate_candidate(_candidate(body), problem="cancel_matmul.py", allow=["gemm"], stop_after="verify")
    assert not verdict.correct and verdict.stage == "verify", verdict.reason
    assert "outside tolerance" in verdict.reason and "against Model run in float64" in verdict.reason
