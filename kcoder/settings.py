"""What the commands share: one declaration of the evaluation policy, the model and the limits.

`kcoder eval`, `optimize`, `chat` and `profile` each build one Settings from their options;
the evaluator's and the profiler's own options are derived from it by `Settings.eval_options()`
and `Settings.profile_options()`, the only places they are built from settings.
Light on purpose: the CLI imports this module for its option types, so nothing heavy here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcoder.choices import (  # the values each option may take (the CLI imports them from here too)
    BUILTIN,
    TOOL_CALL_MODES,
    Device,
    Precision,
    SandboxMode,
    ShapeMode,
    Stage,
    StartFrom,
    ToolCallMode,
    check_choice,
)

if TYPE_CHECKING:
    from kcoder.evaluate.options import EvalOptions
    from kcoder.profile.options import ProfileOptions

# A run succeeds at a verified candidate this many times faster than torch.compile. (The
# reward rule's 5% margin, verdict.SPEEDUP_MARGIN, is a separate rule that happens to agree.)
DEFAULT_TARGET = 1.05
DEFAULT_BUDGET_S = 3.0  # seconds of measured time per implementation


def default_device() -> Device:
    """cuda when a GPU is present, else cpu (checked without importing torch)."""
    return "cuda" if Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists() else "cpu"


def parse_allow(allow: str | None) -> list[str]:
    """`--allow gemm,conv` as a list."""
    return [a.strip() for a in (allow or "").split(",") if a.strip()]


@dataclass
class Settings:
    """One command's settings. Each command reads the fields it has options for."""

    # The evaluation policy (every command).
    device: Device = "cpu"
    allow: list[str] = field(default_factory=list)
    precision: Precision = "strict"
    stop_after: Stage = "timing"
    budget: float = DEFAULT_BUDGET_S
    # Named as the flags (--plain-build, --no-compile) that the CLI and the suite's saved plans map
    # onto these fields by name; EvalOptions says the same positively (fast_build, compile_baseline),
    # and the two builders below are the only places that turn one into the other.
    plain_build: bool = False  # build exactly as plain load_inline does (no faster build)
    no_compile: bool = False  # skip the torch.compile baseline
    sandbox: SandboxMode = "auto"  # how the candidate's process is confined (evaluate/sandbox.py)
    shapes: ShapeMode = "off"  # input sets at batch sizes the judge draws (evaluate/drawnshapes.py)
    sizes: str | None = None  # optimize --shapes NAME=SIZES: the best kernel judged at each (agent/sizes.py)
    # The model (optimize, chat).
    model: str | None = None
    api_base: str | None = None
    profile: str | None = None  # a model profile's name from agent/profiles.json
    tool_call: ToolCallMode | None = None  # overrides the profile's tool-call mode
    stream: bool = True
    # Limits and the run (optimize, chat). In chat, max_turns counts per user message.
    target: float = DEFAULT_TARGET
    keep_going: bool = False
    max_turns: int = 200
    max_cost: float | None = None
    max_time: float | None = None
    runs_dir: Path | None = None
    resume: Path | None = None
    commit: bool = False  # optimize: commit the best verified kernel afterwards
    start: StartFrom | None = None  # optimize with a model: start from the built-in policy's kernel
    tune_trials: int | None = None  # the built-in policy's tuning budget (points judged)
    verbose: bool = False  # optimize, chat: show whole files and diffs after each tool call
    preflight: bool = True  # optimize: baselines and speed of light before the first turn
    # Evaluator knobs without an option (rounds, warm-up, time limits); tests and embedders.
    eval_base: EvalOptions | None = None

    @classmethod
    def from_eval_options(cls, options: EvalOptions, **fields: Any) -> Settings:
        """Settings whose evaluation policy is exactly `options` (plus agent `fields`)."""
        return cls(device=options.device, allow=list(options.allow), precision=options.precision,
                   stop_after=options.stop_after, budget=options.timing_budget_s,
                   plain_build=not options.fast_build, no_compile=not options.compile_baseline,
                   sandbox=options.sandbox, shapes=options.shapes, eval_base=options, **fields)

    def eval_options(self) -> EvalOptions:
        """The evaluator's options for these settings (not validated: see `validate`)."""
        from kcoder.evaluate.options import EvalOptions

        return replace(self.eval_base or EvalOptions(), device=self.device, allow=list(self.allow),
                       precision=self.precision, stop_after=self.stop_after,
                       timing_budget_s=self.budget, fast_build=not self.plain_build,
                       compile_baseline=not self.no_compile, sandbox=self.sandbox, shapes=self.shapes)

    def profile_options(self, full: bool = False, **overrides: Any) -> ProfileOptions:
        """The profiler's options for these settings (the device and precision policy);
        `overrides`: the profiler's own knobs (ncu binary, time limits, saved reports)."""
        from kcoder.profile.options import ProfileOptions

        return ProfileOptions(device=self.device, full=full, precision=self.precision, sandbox=self.sandbox,
                              **overrides)

    def validate(self) -> None:
        """ValueError naming the bad option (device, allow, precision, target, limits)."""
        self.eval_options().validate()
        from kcoder.evaluate.sandbox import require_sandbox

        require_sandbox(self.sandbox)  # --sandbox bwrap that cannot run here: exit 2 before any work
        if self.tool_call is not None:
            check_choice("tool-call mode", self.tool_call, TOOL_CALL_MODES)
        if self.start is not None:
            check_choice("--start", self.start, (BUILTIN,))
        if self.sizes is not None:
            from kcoder.agent.sizes import parse_sizes

            parse_sizes(self.sizes)
        if self.tune_trials is not None and self.tune_trials < 1:
            raise ValueError("--tune-trials must be at least 1")
        if self.target <= 0 or self.max_turns < 1:
            raise ValueError("--target must be > 0 and --max-turns at least 1")

    def policy_answers(self, chat: bool = False) -> bool:
        """Whether kcoder's built-in policy is the model: named, or no model outside chat
        (chat without a model runs slash commands only)."""
        return self.model == BUILTIN or (not self.model and not chat)

    def runs_base(self, problem: Path) -> Path:
        """Where this problem's run directories go."""
        from kcoder.paths import runs_root

        return self.runs_dir or runs_root(problem)
