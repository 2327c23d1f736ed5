"""The end of a passed evaluation: timings into the verdict, the reward and the summary."""

from __future__ import annotations

from typing import Any

from kcoder.evaluate.sol import sol_fraction
from kcoder.evaluate.timing import Timings
from kcoder.verdict import Verdict, reward_for

# A measured time under this share of the speed of light's is faster than the device allows:
# a finding (a broken timer, work done elsewhere, a wrong SOL), never a reward (issue 27).
IMPLAUSIBLE_TIME_SHARE = 2 / 3


def record_errors(v: Verdict, stats: dict[str, Any]) -> None:
    """Keep the largest errors over every checked output (the reference process's statistics)."""
    for name in ("max_abs_err", "max_rel_err", "rel_norm_err"):
        value = stats.get(name)
        if isinstance(value, (int, float)):
            setattr(v, name, max(getattr(v, name) or 0.0, float(value)))
    v.tolerance = stats.get("tolerance") or v.tolerance


def record_timings(v: Verdict, timings: Timings) -> None:
    """Fill the verdict's timing fields, reward and one-line summary from the samples."""
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
    v.eager_sol_fraction = sol_fraction(v.sol_us, v.eager_us)
    v.compile_sol_fraction = sol_fraction(v.sol_us, v.compile_us)
    v.candidate_sol_fraction = sol_fraction(v.sol_us, v.candidate_us)
    v.reward = reward_for(v.correct, v.speedup_vs_eager, v.speedup_vs_compile)
    finding = implausible(v)
    if finding:
        v.implausible = finding
        v.notes.append(finding)
        v.reward = min(v.reward, 1)
    v.stage = "done"
    parts = [f"correct on {v.n_input_sets} input sets + {v.timing_rounds} timed calls"]
    if v.speedup_vs_eager is not None:
        parts.append(f"{v.speedup_vs_eager:.2f}x vs eager")
    if v.speedup_vs_compile is not None:
        parts.append(f"{v.speedup_vs_compile:.2f}x vs torch.compile")
    if v.candidate_sol_fraction is not None:
        parts.append(f"{100 * v.candidate_sol_fraction:.0f}% of the speed of light")
    if finding:
        parts.append("IMPLAUSIBLE: faster than the speed of light allows, no speed-up reward")
    v.reason = ", ".join(parts)


def implausible(v: Verdict) -> str:
    """The finding when the candidate's time is under IMPLAUSIBLE_TIME_SHARE of the SOL's
    (whatever SOL the verdict carries), else "". On the GPU only: there the L2 is flushed
    before every timed call and the ceilings are the device's; a CPU's are measured on a shared
    host whose caches stay warm between calls, so a CPU time under them is no evidence."""
    if v.device != "cuda" or not v.sol_us or not v.candidate_us:
        return ""
    if v.candidate_us >= IMPLAUSIBLE_TIME_SHARE * v.sol_us:
        return ""
    return (f"implausible: the candidate's {v.candidate_us:.1f} us is under {IMPLAUSIBLE_TIME_SHARE:.0%} of the "
            f"speed of light's {v.sol_us:.1f} us ({v.sol_bound or 'unknown'}-bound), faster than the device "
            "allows: a finding, not a speed-up (a broken timer, work done elsewhere, or a wrong ceiling?); "
            "the reward is at most 1")
