"""The candidate's process's own timed calls (its CUDA events or perf_counter): a diagnostic the
judge's clock must confirm (judgetiming.judge_figure), never the verdict's figure. Drawn rounds
are checked against the reference and followed by guarded audit calls."""

from __future__ import annotations

import time
from typing import Any

from kcoder.evaluate.harness.channel import time_value

MAX_CHECKS = 6  # timed outputs checked, and guarded audit calls, per evaluation (each kind)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def candidate_rounds(judge: Any, deadline: float) -> list[float]:
    """The candidate's own figure per round (us), after its warm-up calls."""
    opts = judge.options
    judge.ask_candidate(_left(deadline), "timing", op="warmup", seeds=[judge.seed() for _ in range(opts.warmup)],
                       expect="warm")
    times: list[float] = []
    checks: set[int] = {0}
    audits: set[int] = set()
    for r in range(opts.max_rounds):
        judge.last_seed = judge.seed()
        reply = judge.ask_candidate(_left(deadline), "timing", op="time", seed=judge.last_seed, expect="us")
        times.append(time_value(reply.get("us")) or judge.tampered("a timed call reported no valid time"))
        judge.notes.carveout(reply.get("l2_carveout"))
        if r == 0:
            checks, audits = plan_checks(judge, times[0])
        # The rounds to check were drawn at random: every call must be right.
        if r in checks:
            judge.checked_call("timing", f"timed call {r + 1}", deadline, save_last=True)
        # A diagnostic now (the figure is the judge's clock): min_rounds are enough.
        last = r + 1 >= min(opts.min_rounds, opts.max_rounds)
        if r in audits or (last and opts.audit_every):  # and after the last round, always
            judge.checked_call("timing", f"audit call after timed round {r + 1}", deadline)
        if last:
            break
    return times


def plan_checks(judge: Any, first_us: float) -> tuple[set[int], set[int]]:
    """Rounds whose timed output is checked, and rounds followed by a guarded audit call:
    drawn at random over the diagnostic rounds (min_rounds), a 1/audit_every share of them,
    at most MAX_CHECKS of each kind (each check costs a reference call and an output's trip)."""
    opts = judge.options
    expected = min(opts.min_rounds, opts.max_rounds)
    if not opts.audit_every:
        return set(range(opts.max_rounds)), set()
    share = min(MAX_CHECKS, max(1, expected // opts.audit_every))
    checks = {0, *judge.rng.sample(range(expected), share)}
    return checks, set(judge.rng.sample(range(expected), share))
