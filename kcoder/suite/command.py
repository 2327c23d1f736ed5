"""`kcoder suite`: many problems, one record each, tables and plots.

The suite's folder (`--out`, default `.kcoder/suites/suite-<stamp>` in the current folder)
holds suite.json (what was asked: problems, mode, settings), results.jsonl (a record per
finished problem, appended as it finishes), solutions/ (optimize mode: each problem's best
kernel), and at the end summary.md, summary.json, results.csv and the plots. `--resume DIR`
reads suite.json there and runs only the problems without a record.

`--results FILE` (eval mode) also keeps a results log across suites and sessions (ledger.py):
problems it has for the same candidate, commit, device and options are skipped, and each new
verdict is appended to it. `--limit N` runs at most N problems and `--time-budget S` starts
none after S seconds, so a slice ends cleanly and a later run goes on from there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kcoder.settings import Settings
from kcoder.suite import ledger, schedule
from kcoder.suite.metrics import verdict_of
from kcoder.suite.problems import SuiteInputError, SuiteProblem, attach_solutions, collect_problems
from kcoder.suite.report import append_record, load_records, write_outputs
from kcoder.suite.task import make_spec

SUITE_FILE = "suite.json"
MODES = ("eval", "optimize")
BACKENDS = ("auto", "ray", "pool")


@dataclass
class SuitePlan:
    """What a suite runs: problem sources, mode, where solutions are, where results go."""

    sources: list[str]
    mode: str = "eval"
    solutions: str | None = None
    level: int | None = None
    settings: dict[str, Any] | None = None  # Settings fields, as JSON
    results: str | None = None  # a results log kept across suites (ledger.py)


def settings_fields(settings: Settings) -> dict[str, Any]:
    """The Settings fields a task needs, as JSON (paths as text, the evaluator's base options
    as a dict; no resume or commit: each task is a fresh run)."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.name == "eval_base":
            value = value.to_dict() if value is not None else None
        elif isinstance(value, Path):
            value = str(value)
        out[f.name] = value
    out.update(resume=None, commit=False, runs_dir=None)
    return out


def open_suite(out_dir: Path, plan: SuitePlan | None) -> SuitePlan:
    """A new suite's folder with its plan, or (plan None) the plan of the suite to resume."""
    path = out_dir / SUITE_FILE
    if plan is None:
        try:
            return SuitePlan(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            raise SuiteInputError(f"{out_dir}: not a suite folder to resume (no readable {SUITE_FILE})") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.__dict__, indent=2) + "\n")
    return plan


def default_out_dir() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(".kcoder") / "suites" / f"suite-{stamp}"


def problems_of(plan: SuitePlan, device: str) -> list[SuiteProblem]:
    problems = collect_problems(plan.sources, plan.level)
    if plan.mode == "eval":
        problems = attach_solutions(problems, Path(plan.solutions) if plan.solutions else None, device)
    return problems


def run_suite(plan: SuitePlan | None, out_dir: Path, *, backend: str = "auto", ray_address: str | None = None,
              workers: int | None = None, progress: Any = None, execute: Any = None, force: bool = False,
              limit: int | None = None, time_budget_s: float | None = None,
              ident: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run (or resume, plan None) the suite in `out_dir`; returns its summary. `execute`
    replaces the task runner (scheduler tests); `ident` the results log's identity of this run
    (ledger.identity, found in this process, when None)."""
    plan = open_suite(out_dir, plan)
    settings_json = plan.settings or {}
    device = settings_json.get("device", "cpu")
    problems = problems_of(plan, device)
    done = {} if force else load_records(out_dir)
    todo = [make_spec(p, plan.mode, settings_json) for p in problems if p.name not in done]
    results = Path(plan.results) if plan.results else None
    in_results: list[str] = []
    if results is not None:
        if plan.mode != "eval":
            raise SuiteInputError("--results keeps eval verdicts (a candidate to hash): use it with --mode eval")
        ident = ident or ledger.identity(device, settings_json)
        todo, in_results = ledger.pending(todo, ledger.load(results), ident, force)
    left = todo[limit:] if limit is not None else []
    todo = todo[:limit] if limit is not None else todo
    if progress is not None:
        progress.start(len(problems), len(problems) - len(todo) - len(left))
        if in_results:
            progress.note(f"{len(in_results)} problems already in {results} (same candidate, commit, device, "
                          "options): skipped")
    specs = {s["name"]: s for s in todo}

    def on_result(record: dict[str, Any]) -> None:
        if record.get(NOT_STARTED):  # past the time budget: left for a later run
            left.append(specs[record["name"]])
            return
        best = record.pop("best_source", None)
        if best:  # optimize mode: the problem's best kernel, beside the records
            (out_dir / "solutions").mkdir(exist_ok=True)
            (out_dir / "solutions" / f"{record['name']}.py").write_text(best)
        append_record(out_dir, record)
        if results is not None:
            ledger.append(results, ledger.row_of(record, specs[record["name"]], ident))
        done[record["name"]] = record
        if progress is not None:
            progress.result(record)

    run = execute or schedule.execute_task
    if time_budget_s is not None:
        run = _before(time.time() + time_budget_s, run)
    chosen = _dispatch(todo, device, backend, ray_address, workers, on_result, run)
    if progress is not None:
        progress.stop()
    records = [done[p.name] for p in problems if p.name in done]
    verdicts = [v for v in map(verdict_of, records) if v is not None]
    meta = {"mode": plan.mode, "device": device, "backend": chosen, "date": time.strftime("%Y-%m-%d %H:%M"),
            "device_name": next((v.device_name for v in verdicts if v.device_name), ""),
            "out_dir": str(out_dir), "left": sorted(s["name"] for s in left), "in_results": in_results,
            "results": str(results) if results else None}
    return write_outputs(out_dir, records, meta)


NOT_STARTED = "not_started"


def _before(deadline: float, execute: Any) -> Any:
    """`execute` for tasks that start before `deadline` (wall clock: a Ray node's too); a task
    taken later comes back marked NOT_STARTED, untouched."""

    def run(spec: dict[str, Any], slot: Any) -> dict[str, Any]:
        if time.time() >= deadline:
            return {"name": spec["name"], NOT_STARTED: True}
        return execute(spec, slot)

    return run


def _dispatch(specs: list[dict[str, Any]], device: str, backend: str, ray_address: str | None,
              workers: int | None, on_result: Any, execute: Any) -> str:
    """Run the specs on the chosen backend; returns its name."""
    from kcoder.suite import ray_backend

    if backend not in BACKENDS:
        raise SuiteInputError(f"--backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    use_ray = backend == "ray" or (backend == "auto" and (ray_address or ray_backend.ray_installed()))
    if use_ray and not ray_backend.ray_installed():
        raise SuiteInputError("--backend ray needs Ray: pip install 'kcoder[ray]'")
    if not specs:
        return "ray" if use_ray else "pool"
    if use_ray:
        ray_backend.connect(ray_address)
        ray_backend.run_ray(specs, ray_backend.cluster_slots(device, workers), on_result,
                            execute)
        return "ray"
    schedule.run_pool(specs, schedule.local_slots(device, workers), on_result, execute)
    return "pool"
