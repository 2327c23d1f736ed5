"""What the MCP tools do, as plain blocking functions (the server runs them in worker threads):
the same evaluator, profiler, tuner and skills as the CLI, with the server's settings.

The problem file is named by the client, not chosen by kcoder's user: every evaluation runs it
confined (`confine_problem`: the reference process in a sandbox of its own), and the profiler
runs it, with the candidate, in its target's box.

Bad input (a problem file that fails, a path outside the allowed folders, a missing file, a bad
option) raises ProblemError or ValueError, which the server turns into a tool error; a
candidate that fails is a normal answer whose verdict says why.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcoder.choices import TUNE_STRATEGIES, TuneStrategy, check_choice
from kcoder.mcp.confine import Confinement
from kcoder.mcp.reports import RunIndex
from kcoder.settings import Settings

Notify = Callable[[str], None]  # one line of progress, for a notification


@dataclass
class ServerState:
    """What every tool call shares: the server's settings, its root and the runs it knows."""

    settings: Settings
    confine: Confinement
    runs: RunIndex


@dataclass
class CandidateRef:
    """A candidate as a tool names it: a path, or the source text itself."""

    path: str | None = None
    source: str | None = None


@contextmanager
def candidate_file(state: ServerState, problem: Path, ref: CandidateRef) -> Iterator[Path]:
    """The candidate as a file. Source text goes to a private temp folder (removed afterwards),
    never into the user's tree; a path must lie in the root or the problem's folder."""
    if (ref.path is None) == (ref.source is None):
        raise ValueError("give the candidate either as `candidate` (a path) or as `source` (its text), not both")
    if ref.path is not None:
        yield state.confine.beside(problem, ref.path, "candidate")
        return
    folder = Path(tempfile.mkdtemp(prefix="kcoder-mcp-"))
    try:
        path = folder / "model_new.py"
        path.write_text(ref.source or "", encoding="utf-8")
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def evaluate_call(state: ServerState, problem: str, ref: CandidateRef, stop_after: str, budget: float | None,
                  no_compile: bool, notify: Notify) -> dict[str, Any]:
    """`kcoder eval`: the verdict and its one-line summary."""
    from kcoder.evaluate import evaluate
    from kcoder.ui import verdict_line

    problem_path = state.confine.problem(problem)
    state.runs.remember(problem_path)
    settings = replace(state.settings, stop_after=stop_after, no_compile=no_compile,
                       budget=state.settings.budget if budget is None else budget)
    settings.validate()
    with candidate_file(state, problem_path, ref) as candidate:
        started = time.monotonic()
        verdict = evaluate(problem_path, candidate, replace(settings.eval_options(), on_stage=notify,
                                                            confine_problem=True))
    label = Path(ref.path).name if ref.path else "source"
    summary, _passed = verdict_line(verdict, label, time.monotonic() - started, settings.stop_after)
    return {"summary": summary, "verdict": verdict.to_dict()}


def profile_call(state: ServerState, problem: str, ref: CandidateRef, full: bool) -> str:
    """`kcoder profile --summary`: the compact profile text."""
    from kcoder.profile.profiler import profile_candidate
    from kcoder.profile.render import summary_text

    problem_path = state.confine.problem(problem)
    if state.settings.device != "cuda":
        raise ValueError(f"profile needs the cuda target (a CUDA GPU with Nsight Compute); this server runs "
                         f"with --device {state.settings.device}. Use eval for a verdict with timings.")
    options = state.settings.profile_options(full=full)
    with candidate_file(state, problem_path, ref) as candidate:
        report = profile_candidate(problem_path, candidate, options)
    return summary_text(report, full=full)


@dataclass
class TuneRequest:
    """The tune tool's own arguments (budgets, strategy)."""

    strategy: TuneStrategy = "auto"
    trials: int | None = None
    time_s: float | None = None
    budget: float = 1.0
    no_compile: bool = False  # no torch.compile baseline in the best point's final check


def tune_call(state: ServerState, problem: str, ref: CandidateRef, request: TuneRequest, notify: Notify) -> str:
    """`kcoder tune`: search the candidate's TUNE space; outputs in a run folder beside the problem."""
    from kcoder.tune.command import output_dir, write_tuned
    from kcoder.tune.engine import TuneOptions, tune
    from kcoder.tune.report import importance, markdown_table, summary_lines, write_outputs
    from kcoder.tune.space import load_space

    problem_path = state.confine.problem(problem)
    state.runs.remember(problem_path)
    check_choice("strategy", request.strategy, TUNE_STRATEGIES)
    if (request.trials is not None and request.trials < 1) or (request.time_s is not None and request.time_s <= 0):
        raise ValueError("trials must be at least 1 and time_s positive")
    settings = replace(state.settings, budget=request.budget)
    settings.validate()
    topts = TuneOptions(strategy=request.strategy, trials=request.trials, time_s=request.time_s,
                        compare_compile=not request.no_compile)
    with candidate_file(state, problem_path, ref) as candidate:
        load_space(candidate)  # a bad declaration fails before a folder is made
        folder = output_dir(problem_path, candidate, settings)
        folder.mkdir(parents=True, exist_ok=True)
        options = replace(settings.eval_options(), confine_problem=True)
        result = tune(problem_path, candidate, options, topts, folder, _tune_listener(notify))
        tuned = write_tuned(result, folder, candidate, None)
    write_outputs(result, folder)
    lines = summary_lines(result) + [markdown_table(result, limit=20)]
    imp = importance(result)
    if imp:
        lines.append("parameter importance: " + ", ".join(f"{k} {v:.2f}" for k, v in imp.items()))
    if result.best is not None:
        lines.append(f"best CONFIG = {result.best.config!r}")
    lines.append(f"outputs in {folder} (kcoder://runs/{folder.name}/table.md)"
                 + (f"; tuned file {tuned[0]}" if tuned else "; no valid point, no tuned file"))
    return "\n".join(lines)


def _tune_listener(notify: Notify) -> Callable[[str, dict[str, Any]], None]:
    def listen(kind: str, data: dict[str, Any]) -> None:
        if kind == "point":
            p = data["point"]
            what = f"{p.time_us:.1f} us" if p.valid else f"{p.status}: {p.reason[:80]}"
            notify(f"point {data['done']}: {' '.join(f'{k}={v}' for k, v in p.config.items())}: {what}")
        elif kind == "final":
            notify("best point: verifying it built as plain load_inline builds it")

    return listen


def skill_list(state: ServerState) -> list[dict[str, str]]:
    """The valid skills' names and descriptions (bundled, ~/.kcoder/skills, <root>/.kcoder/skills)."""
    from kcoder.agent.skills import SkillCatalog, default_skill_dirs

    catalog = SkillCatalog.discover(default_skill_dirs(state.confine.root))
    return [{"name": s.name, "description": s.description} for s in catalog.all if s.valid]


def skill_text(state: ServerState, name: str) -> str:
    """One skill's SKILL.md body; ValueError naming the known skills when there is none."""
    from kcoder.agent.skills import SkillCatalog, default_skill_dirs

    catalog = SkillCatalog.discover(default_skill_dirs(state.confine.root))
    skill = catalog.get(name)
    if skill is None:
        raise ValueError(f"no skill named {name!r}; known skills: {', '.join(catalog.names()) or 'none'}")
    return f"# skill {skill.name}\n{skill.description}\n\n{skill.body()}"
