"""`kcoder suite` from the command line's options: the plan, the run with a live progress
display, and the summary printed at the end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kcoder.suite.command import SuitePlan, default_out_dir, run_suite, settings_fields
from kcoder.suite.problems import SuiteInputError

SUITE_ONLY = ("mode", "solutions", "level", "out", "resume_dir", "backend", "ray_address", "workers", "as_json",
              "results", "force", "limit", "time_budget")


def suite_from_cli(problems: list[str], options: dict[str, Any],
                   make_settings: Callable[..., Any]) -> tuple[int, dict[str, Any]]:
    """Run the suite the options describe; (exit code, summary). ValueError for bad input."""
    from kcoder.ui import console

    setting_options = {k: v for k, v in options.items() if k not in SUITE_ONLY}
    settings = make_settings(**setting_options)
    settings.validate()
    resume = options["resume_dir"]
    if resume is not None:
        if problems:
            raise SuiteInputError("--resume takes the problems from the suite's folder: give no PROBLEMS")
        if options["results"] is not None:
            raise SuiteInputError("--resume keeps the --results file its suite was started with: give no --results")
        plan, out_dir = None, resume
    else:
        if not problems:
            raise SuiteInputError("no PROBLEMS given (files, folders or globs; with --level, a KernelBench checkout)")
        plan = SuitePlan(sources=[str(Path(p).resolve()) if Path(p).exists() else p for p in problems],
                         mode=options["mode"], level=options["level"], settings=settings_fields(settings),
                         solutions=str(options["solutions"].resolve()) if options["solutions"] else None,
                         results=str(options["results"].resolve()) if options["results"] else None)
        if plan.results and plan.mode != "eval":
            raise SuiteInputError("--results keeps eval verdicts (a candidate to hash): use it with --mode eval")
        if plan.mode == "eval" and options["level"] is not None and not options["solutions"]:
            raise SuiteInputError("eval mode over KernelBench needs --solutions DIR (KernelBench has none)")
        out_dir = options["out"] or default_out_dir()
    out = console(stderr=options["as_json"])
    from kcoder.suite.progress import SuiteProgress

    for name in ("limit", "time_budget"):
        if options[name] is not None and options[name] <= 0:
            raise SuiteInputError(f"--{name.replace('_', '-')} must be positive, not {options[name]}")
    summary = run_suite(plan, Path(out_dir), backend=options["backend"], ray_address=options["ray_address"],
                        workers=options["workers"], progress=SuiteProgress(out), force=options["force"],
                        limit=options["limit"], time_budget_s=options["time_budget"])
    if not options["as_json"]:
        print_summary(out, summary)
    return (1 if summary.get("statuses", {}).get("error") else 0), summary


def print_summary(out: Any, s: dict[str, Any]) -> None:
    """The headline figures and where the outputs are."""
    from rich.table import Table

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    table = Table(title=f"suite: {s['problems']} problems ({s['mode']}, {s['device']}, {s['backend']})",
                  show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value")
    rows = [
        ("compiled", f"{s['compiled_pct']}% ({s['compiled']}/{s['problems']})"),
        ("correct", f"{s['correct_pct']}% ({s['correct']}/{s['problems']})"),
        ("faster than eager", f"{s['faster_than_eager_pct']}%"),
        ("faster than compile (>1.05x)", f"{s['faster_than_compile_pct']}%"),
        ("geomean vs eager / compile", f"{x(s['geomean_speedup_vs_eager'])} / {x(s['geomean_speedup_vs_compile'])}"),
        ("mean share of SOL", "-" if s["mean_sol_fraction"] is None else f"{100 * s['mean_sol_fraction']:.0f}%"),
        *([("already in --results (skipped)", f"{len(s['in_results'])} ({s['results']})")]
          if s.get("in_results") else []),
        *([("left for a later run", f"{len(s['left'])} (--limit / --time-budget reached)")] if s.get("left") else []),
        ("time / cost per problem", f"{s['seconds_per_problem'] or 0:.1f} s / ${s['cost_per_problem']:.4f}"),
        ("outputs", f"{s['out_dir']}/summary.md, summary.json, results.csv, {', '.join(s.get('plots', []))}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
