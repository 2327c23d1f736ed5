"""Long steps under a live status line: every evaluation and profile that an agent's tool, a
chat command or the end of a run starts shows its stage and elapsed time while it runs (a
slow build must not look like a hang), then one line with the result.

build_agent wraps the evaluator and the profiler here, so optimize and chat show the same.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcoder import ui
from kcoder.agent.toolbox import Evaluator, Profiler, run_evaluator, run_profiler

if TYPE_CHECKING:
    from kcoder.evaluate.options import EvalOptions
    from kcoder.verdict import Verdict

# Every stage of kcoder/choices.py has its label (tests/agent/test_status_labels.py checks it).
STAGES = {"compile": "compile check", "build": "build", "verify": "build → verify",
          "timing": "build → verify → timing"}
LOG_LINE_CHARS = 240  # the result line in logs (no terminal width to fit)


def step_label(candidate: Path, options: EvalOptions, run_fast_build: bool) -> str:
    """What the status line calls an evaluation. A plain build in a run that otherwise builds
    the faster way is the check that what is kept or committed builds without kcoder."""
    name = Path(candidate).name
    if run_fast_build and not options.fast_build:
        return f"plain load_inline build check: {name}"
    return f"{STAGES[options.stop_after]}: {name}"


def result_width(out: ui.Output) -> int:
    return out.console.width - 1 if out.console.is_terminal else LOG_LINE_CHARS


def evaluator_with_status(out: ui.Output, evaluate: Evaluator | None, run_options: EvalOptions) -> Evaluator:
    """`evaluate` (default kcoder's judge) under a live status fed by the judge's stages, then
    the verdict in one line. `run_options`: the run's own options (to name plain-build checks)."""
    inner = evaluate or run_evaluator

    def run(problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
        label = step_label(candidate, options, run_options.fast_build)
        started = time.monotonic()
        with out.status(label, announce=False) as update:
            verdict = inner(problem, candidate, replace(options, on_stage=update))
        short = label.replace(STAGES[options.stop_after] + ": ", "")  # the line says what passed
        line, ok = ui.verdict_line(verdict, short, time.monotonic() - started, options.stop_after)
        out.print_text("  " + ui.clip(line, result_width(out) - 2), "green" if ok else "red", one_line=True)
        return verdict

    return run


def profiler_with_status(out: ui.Output, profiler: Profiler | None) -> Profiler:
    """`profiler` (default kcoder's) under a live status line."""
    inner = profiler or run_profiler

    def run(problem: Path, candidate: Path, options: Any) -> Any:
        label = f"profiling (Nsight Compute): {Path(candidate).name}"
        started = time.monotonic()
        with out.status(label, announce=False):
            report = inner(problem, candidate, options)
        out.print_text(f"  {label}: done · {time.monotonic() - started:.1f} s", "dim")
        return report

    return run
