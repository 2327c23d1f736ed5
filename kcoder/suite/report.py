"""A suite's outputs: results.jsonl (one record per problem, appended as each finishes, so a
killed suite resumes), summary.json, summary.md, results.csv and the plots (plots.py)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from kcoder.suite.metrics import FAST_P, row, summarize

RESULTS = "results.jsonl"
CSV_FIELDS = ["name", "status", "compiled", "correct", "reward", "eager_us", "compile_us", "candidate_us",
              "speedup_vs_eager", "speedup_vs_compile", "sol_us", "candidate_sol_fraction", "compile_sol_fraction",
              "seconds", "cost", "slot", "reason"]


def append_record(out_dir: Path, record: dict[str, Any]) -> None:
    """Persist one finished problem (a whole line per write, flushed to disk)."""
    from kcoder.redact import redact_data

    with open(out_dir / RESULTS, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(redact_data(record), default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def load_records(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The records kept so far, by problem name (a line cut by a kill is skipped: that
    problem runs again)."""
    records: dict[str, dict[str, Any]] = {}
    path = out_dir / RESULTS
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "name" in record:
            records[record["name"]] = record
    return records


def write_outputs(out_dir: Path, records: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """summary.json, summary.md, results.csv and the plots; returns the summary."""
    rows = sorted((row(r) for r in records), key=lambda r: r["name"])
    summary = {**meta, **summarize(rows)}
    (out_dir / "summary.json").write_text(json.dumps({"summary": summary, "problems": rows}, indent=2) + "\n")
    (out_dir / "summary.md").write_text(markdown(summary, rows))
    with open(out_dir / "results.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    from kcoder.suite.plots import write_plots

    summary["plots"] = [p.name for p in write_plots(out_dir, rows, summary)]
    return summary


def fmt_x(value: float | None) -> str:
    """A speed-up: "1.23x", "-" when unknown (also bench/results_table.py's)."""
    return "-" if value is None else f"{value:.2f}x"


def fmt_us(value: float | None) -> str:
    """A time in microseconds: "1,234.5", "-" when unknown."""
    return "-" if value is None else f"{value:,.1f}"


def fmt_pct(value: float | None, sign: str = "%") -> str:
    """A fraction as a whole percent: "73%" ("73" with sign ""), "-" when unknown."""
    return "-" if value is None else f"{100 * value:.0f}{sign}"


def markdown(s: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The summary table, fast_p and the per-problem table."""
    judged = s["problems"] - s.get("out_of_reach", 0)
    lines = [
        f"# kcoder suite: {s['problems']} problems ({s.get('mode', '?')}, {s.get('device', '?')}"
        f"{', ' + s['device_name'] if s.get('device_name') else ''}; {s.get('date', '')})",
        "",
        "| metric | value |", "| --- | --- |",
        f"| out of reach (torch.compile at the hardware limit; not counted below) | {s.get('out_of_reach', 0)} |",
        f"| compiled | {s['compiled_pct']}% ({s['compiled']}/{judged}) |",
        f"| correct | {s['correct_pct']}% ({s['correct']}/{judged}) |",
        f"| faster than eager | {s['faster_than_eager_pct']}% |",
        f"| faster than torch.compile (>1.05x) | {s['faster_than_compile_pct']}% |",
        f"| geomean speed-up vs eager (correct) | {fmt_x(s['geomean_speedup_vs_eager'])} |",
        f"| geomean speed-up vs torch.compile (correct) | {fmt_x(s['geomean_speedup_vs_compile'])} |",
        f"| mean share of the speed of light (correct) | {fmt_pct(s['mean_sol_fraction'])} "
        f"(torch.compile: {fmt_pct(s['mean_compile_sol_fraction'])}) |",
        f"| time per problem | {s['seconds_per_problem'] or 0:.1f} s |",
        f"| cost per problem | ${s['cost_per_problem']:.4f} |",
        "",
        "| fast_p | " + " | ".join(f"p={p:g}" for p in FAST_P) + " |",
        "| --- |" + " --- |" * len(FAST_P),
        "| vs eager | " + " | ".join(f"{s['fast_p_vs_eager'][str(p)]}%" for p in FAST_P) + " |",
        "| vs torch.compile | " + " | ".join(f"{s['fast_p_vs_compile'][str(p)]}%" for p in FAST_P) + " |",
        "",
        "| problem | status | eager us | compile us | kernel us | vs eager | vs compile | SOL us | share of SOL |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['status']} | {fmt_us(r['eager_us'])} | {fmt_us(r['compile_us'])} | "
                     f"{fmt_us(r['candidate_us'])} | {fmt_x(r['speedup_vs_eager'])} | "
                     f"{fmt_x(r['speedup_vs_compile'])} | {fmt_us(r['sol_us'])} | "
                     f"{fmt_pct(r['candidate_sol_fraction'])} |")
    return "\n".join(lines) + "\n"
