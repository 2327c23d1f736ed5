"""A time faster than physics is a finding, not a reward (issue 27, item 4): a GPU candidate
timed under two thirds of its problem's speed-of-light time gets at most reward 1, and the
verdict says why."""

from kcoder.evaluate.summary import record_timings
from kcoder.evaluate.timing import Timings
from kcoder.verdict import Verdict


def _verdict(candidate_us: float, sol_us: float | None, device: str = "cuda") -> Verdict:
    v = Verdict(device=device, correct=True, n_input_sets=5, sol_us=sol_us, sol_bound="memory")
    samples = {"eager": [100.0] * 5, "compile": [90.0] * 5, "candidate": [candidate_us] * 5}
    record_timings(v, Timings(samples))
    return v


def test_under_two_thirds_of_the_sol_gets_no_speedup_reward():
    v = _verdict(candidate_us=6.0, sol_us=10.0)  # 60% of the SOL's time: 1.67x faster than physics
    assert v.speedup_vs_compile > 10 and v.reward == 1
    assert "IMPLAUSIBLE" in v.reason
    assert any(n.startswith("implausible: the candidate's 6.0 us is under 67%") for n in v.notes), v.notes


def test_near_the_sol_keeps_its_reward():
    v = _verdict(candidate_us=7.0, sol_us=10.0)  # 70%: within what measurement allows
    assert v.reward == 3 and "IMPLAUSIBLE" not in v.reason
    assert not any(n.startswith("implausible") for n in v.notes)


def test_no_sol_or_cpu_target_decides_nothing():
    assert _verdict(candidate_us=1.0, sol_us=None).reward == 3
    assert _verdict(candidate_us=1.0, sol_us=10.0, device="cpu").reward == 3


def test_the_agent_ranks_an_implausible_time_as_no_time():
    from kcoder.agent.loop import rank

    fast_but_impossible = _verdict(candidate_us=6.0, sol_us=10.0)
    plausible = _verdict(candidate_us=50.0, sol_us=10.0)
    assert fast_but_impossible.implausible and not plausible.implausible
    assert rank(plausible) > rank(fast_but_impossible)
    assert Verdict.from_dict(fast_but_impossible.to_dict(), strict=True).implausible  # it travels as JSON
