"""`kcoder suite`: many problems, one record each, tables and plots.

The suite's folder (`--out`, default `.kcoder/suites/suite-<stamp>` in the current folder)
holds suite.json (what was asked: problems, mode, settings), results.jsonl (a record per
finished problem, appended as it finishes), solutions/ (optimize mode: each problem's best
kernel), and at the end summary.md, summary.json, results.csv and the plots. `--resume DIR`
reads suite.json there and runs only the problems without a record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kcoder.settings import Settings
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
              workers: int | None = None, progress: Any = None, execute: Any = None) -> dict[str, Any]:
    """Run (or resume, plan None) the suite in `out_dir`; returns its summary. `execute`
    replaces the task runner (scheduler tests)."""
    plan = open_suite(out_dir, plan)
    settings_json = plan.settings or {}
    device = settings_json.get("device", "cpu")
    problems = problems_of(plan, device)
    done = load_records(out_dir)
    todo = [make_spec(p, plan.mode, settings_json) for p in problems if p.name not in done]
    if progress is not None:
        progress.start(len(problems), len(problems) - len(todo))

    def on_result(record: dict[str, Any]) -> None:
        best = record.pop("best_source", None)
        if best:  # optimize mode: the problem's best kernel, beside the records
            (out_dir / "solutions").mkdir(exist_ok=True)
            (out_dir / "solutions" / f"{record['name']}.py").write_text(best)
        append_record(out_dir, record)
        done[record["name"]] = record
        if progress is not None:
            progress.result(record)

    chosen = _dispatch(todo, device, backend, ray_address, workers, on_result, execute)
    if progress is not None:
        progress.stop()
    records = [done[p.name] for p in problems if p.name in done]
    verdicts = [v for v in map(verdict_of, records) if v is not None]
    meta = {"mode": plan.mode, "device": device, "backend": chosen, "date": time.strftime("%Y-%m-%d %H:%M"),
            "device_name": next((v.device_name for v in verdicts if v.device_name), ""),
            "out_dir": str(out_dir)}
    return write_outputs(out_dir, records, meta)


def _dispatch(specs: list[dict[str, Any]], device: str, backend: str, ray_address: str | None,
              workers: int | None, on_result: Any, execute: Any) -> str:
    """Run the specs on the chosen backend; returns its name."""
    from kcoder.suite import ray_backend, schedule

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
                            execute or schedule.execute_task)
        return "ray"
    schedule.run_pool(specs, schedule.local_slots(device, workers), on_result, execute or schedule.execute_task)
    return "pool"
