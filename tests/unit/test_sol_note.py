"""Faster than the speed of light is a note, not a finding (issue 40, item 6): the SOL counts the
reference graph's FLOPs and tensors, and a verified rewrite may do less (on an H100,
14_Gemm_Divide_Sum_Scaling at 24x vs torch.compile). Only the physical floor refuses a time
(test_physical_floor.py)."""

from kcoder.evaluate.summary import record_timings
from kcoder.evaluate.timings import Timings
from kcoder.verdict import Verdict


def _verdict(candidate_us: float, sol_us: float | None, device: str = "cuda") -> Verdict:
    v = Verdict(device=device, correct=True, n_input_sets=5, sol_us=sol_us, sol_bound="memory")
    samples = {"eager": [100.0] * 5, "compile": [90.0] * 5, "candidate": [candidate_us] * 5}
    record_timings(v, Timings(samples))
    return v


def test_under_two_thirds_of_the_sol_is_a_note_and_keeps_its_reward():
    for device in ("cuda", "cpu"):
        v = _verdict(candidate_us=6.0, sol_us=10.0, device=device)  # 167% of the SOL
        assert v.reward == 3 and v.correct and not v.implausible
        assert "IMPLAUSIBLE" not in v.reason and "167% of the speed of light" in v.reason
        note = next(n for n in v.notes if n.startswith("faster than the speed of light"))
        assert note.startswith("faster than the speed of light: 6.0 us is under 67% of the reference graph's "
                               "10.0 us (memory-bound at the measured ceilings)")
        assert note.endswith("a note, not a finding (only the physical floor refuses a time)")
        assert len(note) <= 300  # the verdict's notes are capped there (runner.finish)


def test_near_the_sol_has_no_note():
    v = _verdict(candidate_us=7.0, sol_us=10.0)  # 70%: within what measurement allows
    assert v.reward == 3 and not any(n.startswith("faster than the speed of light") for n in v.notes)


def test_no_sol_decides_nothing():
    v = _verdict(candidate_us=1.0, sol_us=None)
    assert v.reward == 3 and not v.notes


def test_the_agent_ranks_a_verified_rewrite_by_its_time():
    from kcoder.agent.loop import rank

    rewrite = _verdict(candidate_us=6.0, sol_us=10.0)  # faster than light, above any floor
    plain = _verdict(candidate_us=50.0, sol_us=10.0)
    assert rank(rewrite) > rank(plain)
