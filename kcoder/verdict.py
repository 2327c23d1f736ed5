"""The evaluator's answer about one candidate: what happened, how fast, what reward, and why."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# A speed-up must beat its baseline by this factor to count (the CUDA Agent reward rule).
SPEEDUP_MARGIN = 1.05


@dataclass
class Verdict:
    """Result of evaluating a candidate against a problem. JSON-serialisable.

    `stage` is the last stage reached: "static", "build", "verify", "timing" or "done".
    `reason` is one line saying why the candidate failed, or a one-line summary when it passed.
    """

    problem: str = ""
    candidate: str = ""
    device: str = ""  # "cpu" or "cuda"
    device_name: str = ""
    torch_version: str = ""
    precision: str = "strict"
    allow: list[str] = field(default_factory=list)
    stage: str = "static"
    compiled: bool = False
    correct: bool = False
    reward: int = -1
    reason: str = ""
    # Correctness, over every verified call (verification and timed runs).
    n_input_sets: int = 0
    shapes: str = ""  # "right at N of M batch sizes the judge drew (...)" (drawnshapes.py); "": not asked
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_norm_err: float | None = None
    tolerance: dict[str, float] = field(default_factory=dict)
    # Timing in microseconds (median) and spread (interquartile range).
    eager_us: float | None = None
    compile_us: float | None = None
    candidate_us: float | None = None
    eager_iqr_us: float | None = None
    compile_iqr_us: float | None = None
    candidate_iqr_us: float | None = None
    timing_rounds: int = 0
    # The candidate process's own figure (its events, median of its diagnostic rounds): never the
    # verdict's figure (that is the judge's clock), compared with it and with the physical floor.
    reported_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    # 90% interval of the per-round speed-up ratios: the confidence of a claimed speed-up.
    speedup_vs_eager_ci: list[float] | None = None
    speedup_vs_compile_ci: list[float] | None = None
    # Speed of light (evaluate/sol.py): the reference's FLOPs (torch's counter) and the bytes
    # any implementation must move, the least time the measured device could take for them,
    # and each implementation's share of it (sol_us / its time; 1.0 = at the SOL).
    flops: float | None = None
    min_bytes: int | None = None
    sol_us: float | None = None
    sol_bound: str = ""  # "memory" or "compute": which ceiling sets the SOL
    sol_ceilings: str = ""  # the measured ceilings used, in words
    eager_sol_fraction: float | None = None
    compile_sol_fraction: float | None = None
    candidate_sol_fraction: float | None = None
    # The physical floor (evaluate/floor.py): the least time any correct implementation takes
    # (the inputs its outputs depend on read once, its outputs written once, at the fastest
    # measured copy rate, with a margin), and that in words. A time under it is refused.
    floor_us: float | None = None
    floor_basis: str = ""
    # A candidate's time under the physical floor: the refusal, in words ("" otherwise). Faster
    # than the FLOP-based SOL alone is a note, never this (a verified rewrite may do less work).
    implausible: str = ""
    notes: list[str] = field(default_factory=list)
    log: str = ""  # trimmed compiler output or traceback, for people and for the agent
    # "accepted" (correct), "rejected" (the candidate failed), "compiled" (--stop-after build,
    # and it built), "error" (kcoder's own failure: never charged to the candidate, reward 0).
    status: str = "rejected"
    sandbox: str = ""  # "bwrap" or "none": how the candidate's process was confined
    # Device memory in MiB: the evaluation's peak (both processes) and a plain reference call's;
    # footprint = one input set + the reference's output + the candidate's output.
    peak_memory_mb: float | None = None
    reference_peak_mb: float | None = None
    footprint_mb: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    # The best candidate verified again, built as plain load_inline builds it: "verified", or
    # why that failed; None when not checked (a --plain-build run, or not the best candidate).
    plain_build: str | None = None

    def fail(self, stage: str, reason: str, log: str = "") -> Verdict:
        """Mark the verdict failed at `stage` with a one-line `reason`."""
        self.stage = stage
        self.correct = False
        self.reward = -1
        self.reason = reason.strip().splitlines()[0] if reason.strip() else "failed"
        if log:
            self.log = log
        return self

    def error(self, reason: str, log: str = "") -> Verdict:
        """Mark the evaluation itself failed (kcoder's fault, not the candidate's)."""
        self.status = "error"
        self.correct = False
        self.reward = 0
        self.reason = f"evaluation error: {reason.strip().splitlines()[0] if reason.strip() else 'failed'}"
        if log:
            self.log = log
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any], strict: bool = False) -> Verdict:
        """A verdict from its JSON form. `strict`: a key this kcoder does not know (a field
        renamed on one side) is an error rather than dropped, so no figure goes missing quietly."""
        unknown = sorted(k for k in data if k not in cls.__dataclass_fields__)
        if strict and unknown:
            raise ValueError(f"verdict fields unknown to this kcoder: {', '.join(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def plain_build_ok(verdict: Verdict) -> bool:
    """A verdict's "plain_build" check passed (or was never run: older runs, --plain-build)."""
    return verdict.plain_build in (None, "verified")


def reward_for(correct: bool, speedup_vs_eager: float | None, speedup_vs_compile: float | None) -> int:
    """CUDA Agent reward: -1 wrong; 3 if >5% faster than eager and torch.compile; 2 if >5%
    faster than eager only; 1 otherwise (correct but not meaningfully faster)."""
    if not correct:
        return -1
    beats_eager = speedup_vs_eager is not None and speedup_vs_eager > SPEEDUP_MARGIN
    beats_compile = speedup_vs_compile is not None and speedup_vs_compile > SPEEDUP_MARGIN
    if beats_eager and beats_compile:
        return 3
    if beats_eager:
        return 2
    return 1
