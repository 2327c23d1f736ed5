"""Options that shape one evaluation. Plain data: it travels to the worker as JSON."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kcoder.choices import ALLOWABLE, DEVICES, PRECISIONS, SANDBOX_MODES, SHAPE_MODES, STAGES, check_choice

# Set by `kcoder mcp` for the `kcoder optimize` runs it starts: the problem came from an MCP client.
CONFINE_PROBLEM_ENV = "KCODER_CONFINE_PROBLEM"


def confined_problem() -> bool:
    """Whether this process works for an MCP client's problem (see CONFINE_PROBLEM_ENV)."""
    return os.environ.get(CONFINE_PROBLEM_ENV) == "1"


@dataclass
class EvalOptions:
    """How to evaluate a candidate.

    device: "cpu" or "cuda". allow: library families the candidate may call through torch
    ("gemm" = cuBLAS/mm/addmm/bmm, "conv" = cuDNN convolution). precision: "strict" (fp32 must
    be fp32) or "relaxed" (TF32/bf16 allowed, baselines timed with the same relaxations).
    stages: stop after "compile" (host work only: the candidate's module imported, nothing on the
    device, no reference process; tune's build-ahead), "build", "verify" or run "timing" too.
    fast_build: let kcoder build the candidate's extension faster (precompiled torch header,
    torch-free CUDA unit; same code, see build/fastbuild.py); False builds exactly as plain
    load_inline does.
    """

    device: str = "cpu"
    allow: list[str] = field(default_factory=list)
    precision: str = "strict"
    stop_after: str = "timing"  # "compile" | "build" | "verify" | "timing"
    fast_build: bool = True
    n_input_sets: int = 5
    # Input sets at batch sizes the judge draws (drawnshapes.py): "off"; "auto" notes where the
    # candidate is wrong or raises; "strict" refuses a wrong answer there (a raise stays a note).
    shapes: str = "off"
    seed: int = 0
    build_timeout_s: float = 900.0  # the compiler (inside load_inline)
    import_timeout_s: float = 120.0  # Python start-up and the candidate's module code outside load_inline
    init_timeout_s: float = 120.0  # ModelNew(*get_init_inputs()) and its weights
    problem_timeout_s: float = 300.0  # each request to the reference process (the user's Model)
    verify_timeout_s: float = 180.0
    timing_timeout_s: float = 600.0
    # False only in kcoder's own red-team tests, to show that the layers behind the static
    # checks hold on their own; never exposed on the command line.
    static_checks: bool = True
    sandbox: str = "auto"  # "auto" | "bwrap" | "none" (see evaluate/sandbox.py)
    host_memory_gb: float | None = None  # candidate's processes, resident; None: 3/4 of the host's memory
    gpu_memory_fraction: float = 0.5  # the candidate's caching-allocator cap (the reference needs room too)
    # Timing: warm-up calls per implementation, then rounds until either bound is reached.
    warmup: int = 3
    min_rounds: int = 10
    max_rounds: int = 100
    timing_budget_s: float = 3.0
    compile_baseline: bool = True
    # Every audit_every-th timed round is followed by an untimed guarded audit call, and a
    # timed call's output is checked with probability 1/audit_every.
    audit_every: int = 4
    # The problem file came from someone other than kcoder's user (an MCP client): the reference
    # process runs it in a box of its own, like the candidate (evaluate/spawn.py).
    confine_problem: bool = field(default_factory=confined_problem)
    # compile-only on cuda, where the GPU stays hidden: the arch to compile for ("9.0"), so the
    # timed evaluation finds the build in the cache ("": TORCH_CUDA_ARCH_LIST or torch's default).
    build_arch: str = ""
    # Told each stage as it starts ("verifying input set 2 of 5"), for a live status line
    # (evaluate/progress.py). Stays in the judge's process: never part of to_dict().
    on_stage: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def validate(self) -> None:
        check_choice("device", self.device, DEVICES)
        bad = [a for a in self.allow if a not in ALLOWABLE]
        if bad:
            raise ValueError(f"--allow accepts {', '.join(ALLOWABLE)}; unknown: {', '.join(bad)}")
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("stop_after", self.stop_after, STAGES)
        check_choice("--sandbox", self.sandbox, SANDBOX_MODES)
        check_choice("--shapes", self.shapes, SHAPE_MODES)
        if self.n_input_sets < 5:
            raise ValueError("at least 5 input sets are verified")

    def host_memory_bytes(self) -> int:
        """The candidate's host-memory limit in bytes."""
        if self.host_memory_gb is not None:
            return int(self.host_memory_gb * 2**30)
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 16 * 2**30
        return int(total * 0.75)

    def plain_build_check(self) -> EvalOptions:
        """These options for verifying a candidate built exactly as plain load_inline builds it."""
        return replace(self, stop_after="verify", fast_build=False)

    def to_dict(self) -> dict[str, Any]:
        # Not asdict(): it would deep-copy on_stage (and whatever a bound method holds).
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), list) else v
                for f in fields(self) if f.name != "on_stage"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalOptions:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "on_stage"})
