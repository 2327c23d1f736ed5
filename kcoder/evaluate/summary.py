"""The end of a passed evaluation: timings into the verdict, the reward and the summary."""

from __future__ import annotations

from typing import Any

from kcoder.evaluate.reference.floor import floor_out_of_line, under_floor
from kcoder.evaluate.reference.sol import sol_fraction
from kcoder.evaluate.timings import Timings
from kcoder.verdict import Verdict, reward_for

# A time under this share of the speed of light's is worth a note: the candidate does less work
# than the reference's graph (a verified rewrite may), or its time is wrong. Only the physical
# floor (floor.py) refuses a time: the SOL counts FLOPs a rewrite may honestly skip.
SOL_NOTE_SHARE = 2 / 3


def record_errors(v: Verdict, stats: dict[str, Any]) -> None:
    """Keep the largest errors over every checked output (the reference process's statistics)."""
    for name in ("max_abs_err", "max_rel_err", "rel_norm_err"):
        value = stats.get(name)
        if isinstance(value, (int, float)):
            setattr(v, name, max(getattr(v, name) or 0.0, float(value)))
    # The loosest rule any check needed stays: a later output that float32's tolerance accepted
    # (a drawn call on scaled inputs that no longer cancel) does not hide the float64 rule's use.
    tolerance = stats.get("tolerance")
    if tolerance and ("float64_factor" in tolerance or "float64_factor" not in (v.tolerance or {})):
        v.tolerance = tolerance


def record_timings(v: Verdict, timings: Timings, too_fast: bool = False) -> None:
    """Fill the verdict's timing fields, reward and one-line summary from the samples. `too_fast`:
    every one of the candidate's samples was at the judge's clock's resolution and a sliver of its
    batch (judgeclock.NEGLIGIBLE_SHARE: work it could not tell from nothing): its figure is an
    upper bound, and no speed-up is claimed from it."""
    v.timing_rounds = len(timings.samples["candidate"])
    v.eager_us, v.eager_iqr_us = timings.median("eager"), timings.iqr("eager")
    v.candidate_us, v.candidate_iqr_us = timings.median("candidate"), timings.iqr("candidate")
    v.speedup_vs_eager = timings.speedup("eager", "candidate")
    v.speedup_vs_eager_ci = timings.speedup_ci("eager", "candidate")
    if "compile" in timings.samples:
        v.compile_us, v.compile_iqr_us = timings.median("compile"), timings.iqr("compile")
        v.speedup_vs_compile = timings.speedup("compile", "candidate")
        v.speedup_vs_compile_ci = timings.speedup_ci("compile", "candidate")
    else:
        v.notes.append("torch.compile baseline skipped (--no-compile): speed-up vs compile unknown")
    if too_fast:
        v.speedup_vs_eager = v.speedup_vs_compile = v.speedup_vs_eager_ci = v.speedup_vs_compile_ci = None
        v.notes.append("too fast to measure: every batch of the candidate's was at the judge's clock's resolution, "
                       "so its figure is only an upper bound and no speed-up is claimed")
    v.eager_sol_fraction = sol_fraction(v.sol_us, v.eager_us)
    v.compile_sol_fraction = sol_fraction(v.sol_us, v.compile_us)
    v.candidate_sol_fraction = sol_fraction(v.sol_us, v.candidate_us)
    v.reward = reward_for(v.correct, v.speedup_vs_eager, v.speedup_vs_compile)
    note = faster_than_light(v)
    if note:
        v.notes.append(note)
    v.stage = "done"
    parts = [f"correct on {v.n_input_sets} input sets + {v.timing_rounds} timed calls"]
    if v.speedup_vs_eager is not None:
        parts.append(f"{v.speedup_vs_eager:.2f}x vs eager")
    if v.speedup_vs_compile is not None:
        parts.append(f"{v.speedup_vs_compile:.2f}x vs torch.compile")
    if too_fast:
        parts.append("too fast for the judge's clock (no speed-up claimed)")
    if v.candidate_sol_fraction is not None:
        parts.append(f"{100 * v.candidate_sol_fraction:.0f}% of the speed of light")
    v.reason = ", ".join(parts)
    refuse_under_floor(v)


def refuse_under_floor(v: Verdict) -> None:
    """Refuse the verdict when the candidate's time is under the physical floor (floor.py), on
    every device; unless a baseline ran under it too (then the floor is wrong here: a note)."""
    out_of_line = floor_out_of_line(v.floor_us, {"eager": v.eager_us, "torch.compile": v.compile_us})
    if out_of_line:
        v.notes.append(out_of_line)
        return
    refusal = under_floor(v.candidate_us, v.floor_us, v.floor_basis) or reported_under_floor(v)
    if refusal:
        v.implausible = refusal
        v.fail("timing", refusal)


def reported_under_floor(v: Verdict) -> str:
    """The refusal when the candidate's process reported a time under the physical floor: no
    correct implementation runs that fast, so its own timer was made to lie. The verdict's figure
    is the judge's anyway; this refuses the lie itself, on every device (on the cpu target a gap
    between the two clocks alone is only a note: the host's load reaches the judge's wall clock)."""
    if not under_floor(v.reported_us, v.floor_us, v.floor_basis):
        return ""
    return (f"integrity: the candidate's process reported {v.reported_us:,.1f} us per call, under the physical "
            f"floor of {v.floor_us:,.1f} us ({v.floor_basis}): its own timer does not see all of its work")


def faster_than_light(v: Verdict) -> str:
    """A note when the candidate's time is under SOL_NOTE_SHARE of the speed of light's, else
    "". Information, not a finding: the SOL is the reference graph's FLOPs and tensors, and a
    verified rewrite may do fewer (a folded weight, a reduction moved before a matmul)."""
    if not v.sol_us or not v.candidate_us or v.candidate_us >= SOL_NOTE_SHARE * v.sol_us:
        return ""
    return (f"faster than the speed of light: {v.candidate_us:,.1f} us is under {SOL_NOTE_SHARE:.0%} of the "
            f"reference graph's {v.sol_us:,.1f} us ({v.sol_bound or 'unknown'}-bound at the measured ceilings): "
            "less work than that graph (a verified rewrite may do less) or a wrong time; a note, not a finding "
            "(only the physical floor refuses a time)")
