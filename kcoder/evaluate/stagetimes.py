"""Where a verdict's seconds go: every request the judge makes, and the start-up stamps its two
child processes report, summed into named stages (`Verdict.seconds`).

The judge adds the time of each request it waits for, named by the process, the operation and
the judge's stage (`add_request`); the child processes stamp their start-up (process start,
torch imported, problem loaded, candidate imported and compiled, ...) with the wall clock, and
`add_stamps` turns consecutive stamps into durations. A candidate's stamps are its own word:
information only, each clamped to the wall time the judge saw, and never used for a decision.
The reference's start-up runs while the candidate builds, so stages overlap and their sum
exceeds the wall time ("total"); `ORDER` lists them in the order of an evaluation.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

ORDER = ("sandbox", "reference_reset", "reference_process_start", "reference_torch_import",
         "reference_problem_load", "reference_first_call", "candidate_process_start", "candidate_torch_import",
         "candidate_compile", "candidate_import", "wait_for_reference", "candidate_init", "build", "verify_calls",
         "reference_outputs", "verify",
         "baselines", "baselines_eager", "baselines_compile", "baselines_cached", "sol", "candidate_restart",
         "candidate_timing", "judge_clock", "audits", "cross_checks", "timing", "total")

# (process, operation) -> stage; a pair not listed is named by the judge's stage.
_REQUESTS = {("reference", "baselines"): "baselines", ("reference", "sol"): "sol",
             ("reference", "reset"): "reference_reset",
             ("reference", "peak"): "cross_checks", ("reference", "notes"): "reference_outputs",
             ("candidate", "warmup"): "candidate_timing", ("candidate", "time"): "candidate_timing",
             ("candidate", "save_last"): "audits", ("candidate", "save_batch"): "judge_clock",
             ("candidate", "batch"): "judge_clock",
             ("candidate", "gate"): "judge_clock", ("reference", "gate"): "baselines",
             ("candidate", "kernel_time"): "cross_checks",
             ("candidate", "peak"): "cross_checks"}
# Start-up stamps in the order each child process reports them, and the stage each gap names.
REFERENCE_STAMPS = (("main", "reference_process_start"), ("torch", "reference_torch_import"),
                    ("loaded", "reference_problem_load"), ("first", "reference_first_call"))
CANDIDATE_STAMPS = (("main", "candidate_process_start"), ("torch", "candidate_torch_import"),
                    ("imported", "candidate_import"), ("init", "wait_for_reference"), ("built", "candidate_init"))


class StageClock:
    """Seconds per named stage of one evaluation."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)

    def add(self, stage: str, seconds: float) -> None:
        if math.isfinite(seconds) and seconds > 0:
            self.spent[stage] += seconds

    def add_request(self, process: str, op: str, stage: str, seconds: float) -> None:
        """One request's round trip: a check during verification computes reference outputs,
        during timing it (and the candidate's verify call) is an audit."""
        name = _REQUESTS.get((process, op))
        if name is None:
            if op in ("check", "verify"):
                name = "reference_outputs" if stage == "verify" and process == "reference" else (
                    "verify_calls" if stage == "verify" else "audits")
            else:
                return  # start-up replies and build steps are named by their stamps
        self.add(name, seconds)

    def add_stamps(self, spawned: float, stamps: Any, order: tuple[tuple[str, str], ...], wall_s: float,
                   compile_s: Any = None) -> None:
        """Durations between a child's consecutive wall-clock stamps, starting at `spawned`
        (the judge's wall clock just before it started the process). Values that are not
        numbers, run backwards or exceed the wall time the judge saw are dropped."""
        if not isinstance(stamps, dict):
            return
        last = spawned
        for key, stage in order:
            value = stamps.get(key)
            if not isinstance(value, (int, float)) or not last <= value <= spawned + wall_s + 1.0:
                return
            seconds = value - last
            if stage == "candidate_import" and isinstance(compile_s, (int, float)) and 0 <= compile_s <= seconds:
                self.add("candidate_compile", compile_s)  # load_inline's share of the candidate's import
                seconds -= compile_s
            self.add(stage, seconds)
            last = value

    def reference_started(self, spawned: float, info: dict[str, Any]) -> None:
        """The reference process's start-up reply, `spawned` the wall clock before its start."""
        self.add_stamps(spawned, info.get("stamps"), REFERENCE_STAMPS, time.time() - spawned)

    def candidate_built(self, spawned: float, built: dict[str, Any], first: bool) -> None:
        """The candidate's build reply: its stamps the first time, a restart's wall time after."""
        if first:
            self.add_stamps(spawned, built.get("stamps"), CANDIDATE_STAMPS, time.time() - spawned,
                            built.get("compile_s"))
        else:
            self.add("candidate_restart", time.time() - spawned)

    def into(self, seconds: dict[str, float]) -> None:
        """Add these stages to a verdict's `seconds` (stages already there are kept)."""
        for name in sorted(self.spent, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
            seconds.setdefault(name, round(self.spent[name], 3))
