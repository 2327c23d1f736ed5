"""One problem of a suite, in a process of its own on the device its slot pins.

`python -m kcoder.suite.task SPEC.json RESULT.json`. The spec carries the problem's and the
solution's source text, so a task runs on any node of a cluster without a shared file
system: the files are written into a private temp folder there and evaluated (eval mode) or
optimized (optimize mode, any brain) by kcoder's own evaluator, which writes into the node's
own build cache ($KCODER_CACHE there). The result is one JSON record, the same whichever
backend started the process.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kcoder.suite.problems import SuiteProblem


def make_spec(problem: SuiteProblem, mode: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What a task process needs: the sources, the mode and the Settings fields to use."""
    return {"name": problem.name, "mode": mode, "settings": settings,
            "problem": str(problem.path), "problem_source": problem.path.read_text(),
            "solution": str(problem.solution) if problem.solution else None,
            "solution_source": problem.solution.read_text() if problem.solution else None}


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one task here and return its record (never raises for the problem's failures)."""
    from kcoder.settings import Settings

    settings = Settings(**_settings_fields(spec["settings"]))
    started = time.perf_counter()
    record: dict[str, Any] = {"name": spec["name"], "mode": spec["mode"], "problem": spec["problem"],
                              "solution": spec["solution"], "verdict": None, "cost": 0.0}
    with tempfile.TemporaryDirectory(prefix="kcoder-suite-task-") as tmp:
        problem = Path(tmp) / Path(spec["problem"]).name
        problem.write_text(spec["problem_source"])
        try:
            record.update(_evaluate(spec, problem, settings) if spec["mode"] == "eval"
                          else _optimize(problem, settings))
        except Exception as exc:  # a bad problem file, or kcoder's own failure: that task's record
            from kcoder.problem import ProblemError

            bad = isinstance(exc, (ProblemError, ValueError))
            record.update(status="bad_problem" if bad else "error",
                          reason=str(exc).replace(str(problem), spec["problem"])[:300])
    record["seconds"] = round(time.perf_counter() - started, 2)
    record["node"] = os.uname().nodename
    return record


def _settings_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Settings fields from JSON: paths and the evaluator's base options as objects again."""
    from kcoder.evaluate.options import EvalOptions

    out = {k: Path(v) if k in ("runs_dir", "resume") and v else v for k, v in fields.items()}
    if isinstance(out.get("eval_base"), dict):
        out["eval_base"] = EvalOptions.from_dict(out["eval_base"])
    return out


def _evaluate(spec: dict[str, Any], problem: Path, settings: Any) -> dict[str, Any]:
    from kcoder.evaluate import evaluate

    if spec["solution_source"] is None:
        return {"status": "missing", "reason": "no solution file matched this problem"}
    settings.validate()
    candidate = problem.parent / "solution" / Path(spec["solution"]).name
    candidate.parent.mkdir()
    candidate.write_text(spec["solution_source"])
    verdict = evaluate(problem, candidate, settings.eval_options()).to_dict()
    verdict["problem"], verdict["candidate"] = spec["problem"], spec["solution"]
    return {"status": verdict["status"], "reason": verdict["reason"], "verdict": verdict}


def _optimize(problem: Path, settings: Any) -> dict[str, Any]:
    from rich.console import Console

    from kcoder.agent.optimize import optimize
    from kcoder.ui import Output

    settings.runs_dir = problem.parent / "runs"
    log = io.StringIO()
    code = optimize(problem, settings, Output(Console(file=log, width=120)))
    runs = sorted(settings.runs_dir.glob("*/report.json")) if settings.runs_dir.exists() else []
    if not runs:
        # exit 2 without a run directory: a usage failure (no model, a missing key)
        return {"status": "not_run" if code == 2 else "error", "reason": log.getvalue().strip()[-300:]}
    report = json.loads(runs[-1].read_text())
    best = report.get("best")
    best_file = runs[-1].parent / "best" / "model_new.py"
    return {"status": best["status"] if best else report.get("status", "rejected"),  # e.g. out_of_reach
            "reason": report.get("message", ""), "verdict": best, "cost": report.get("cost", 0.0),
            "reference": report.get("reference"), "turns": report.get("turns"), "exit_code": code,
            "best_source": best_file.read_text() if best and best_file.exists() else None}


def main() -> None:
    from kcoder.suite.schedule import pin_to_slot

    pin_to_slot()
    spec = json.loads(Path(sys.argv[1]).read_text())
    record = run_spec(spec)
    tmp = Path(sys.argv[2] + ".tmp")
    tmp.write_text(json.dumps(record, default=str))
    os.replace(tmp, sys.argv[2])


if __name__ == "__main__":
    main()
