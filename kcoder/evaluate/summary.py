"""The end of a passed evaluation: timings into the verdict, the reward and the summary."""

from __future__ import annotations

from typing import Any

from kcoder.evaluate.sol import sol_fraction
from kcoder.evaluate.timing import Timings
from kcoder.verdict import Verdict, reward_for


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
    v.stage = "done"
    parts = [f"correct on {v.n_input_sets} input sets + {v.timing_rounds} timed calls"]
    if v.speedup_vs_eager is not None:
        parts.append(f"{v.speedup_vs_eager:.2f}x vs eager")
    if v.speedup_vs_compile is not None:
        parts.append(f"{v.speedup_vs_compile:.2f}x vs torch.compile")
    if v.candidate_sol_fraction is not None:
        parts.append(f"{100 * v.candidate_sol_fraction:.0f}% of the speed of light")
    v.reason = ", ".join(parts)
