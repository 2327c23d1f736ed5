"""The README's tables from a results log that `kcoder suite --results FILE` kept (the judge's
verdicts, appended slice by slice; bench/results/kernelbench-h100.jsonl is the committed one).

    python bench/results_table.py bench/results/kernelbench-h100.jsonl [--device H100] [--commit SHA]

Per problem the latest row (of the device with the most rows unless --device picks one, and of
any commit unless --commit does). Prints the provenance (device, torch, commits, dates), a table
per level (problems, verified, faster than eager, geomean vs eager and vs torch.compile over the
verified ones, the count at >= 1.05x vs torch.compile, the mean share of the speed of light),
then a row per problem. Every figure is a verdict's: nothing here measures anything.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.suite.report import fmt_pct, fmt_us, fmt_x  # noqa: E402 (the suite's tables' own formats)

MARGIN = 1.05  # the reward's margin over torch.compile


def read_rows(paths: list[Path]) -> list[dict]:
    """The rows of the files, in order (a line cut by a killed run is skipped); SystemExit
    naming the file for one that is missing or holds no rows."""
    rows = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"{path}: cannot read the results file ({exc.strerror})") from None
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "name" in row and "candidate_sha256" in row:
                rows.append(row)
    if not rows:
        raise SystemExit(f"{', '.join(map(str, paths))}: no results rows (written by kcoder suite --results)")
    return rows


def latest(rows: list[dict], device: str | None = None, commit: str | None = None) -> list[dict]:
    """The last row per (level, problem) of one device (default: the one with the most rows)
    and, given, one commit (a prefix); sorted by level and KernelBench's number."""
    if device is None:
        device = Counter(r.get("device_name", '') for r in rows).most_common(1)[0][0]
        rows = [r for r in rows if r.get("device_name", '') == device]
    else:
        rows = [r for r in rows if device.lower() in str(r.get("device_name", '')).lower()]
    if commit:
        rows = [r for r in rows if str(r.get("commit", '')).startswith(commit)]
    last = {(r.get("level"), r["name"]): r for r in rows}
    return sorted(last.values(), key=lambda r: (r.get("level") or 99, _number(r["name"]), r["name"]))


def _number(name: str) -> int:
    found = re.match(r"(\d+)_", name)
    return int(found.group(1)) if found else 10**6


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def level_figures(rows: list[dict]) -> dict:
    """One level's figures: over all its problems, and over the verified (and timed) ones."""
    verified = [r for r in rows if r.get("correct")]
    timed = [r for r in verified if r.get("speedup_vs_compile") and r.get("speedup_vs_eager")]
    sol = [r["candidate_sol_fraction"] for r in timed if r.get("candidate_sol_fraction") is not None]
    csol = [r["compile_sol_fraction"] for r in timed if r.get("compile_sol_fraction") is not None]
    return {"problems": len(rows), "verified": len(verified),
            "faster_than_eager": sum(r["speedup_vs_eager"] > 1.0 for r in timed),
            "geomean_vs_eager": geomean([r["speedup_vs_eager"] for r in timed]),
            "geomean_vs_compile": geomean([r["speedup_vs_compile"] for r in timed]),
            "at_margin_vs_compile": sum(r["speedup_vs_compile"] >= MARGIN for r in timed),
            "mean_sol": sum(sol) / len(sol) if sol else None,
            "mean_compile_sol": sum(csol) / len(csol) if csol else None}


def _count(count: int, total: int) -> str:
    """A count and its share of the total: "2 (67%)"."""
    return f"{count} ({100 * count / total:.0f}%)" if total else "0"


def render(rows: list[dict], source: str = "") -> str:
    """The markdown: provenance, the table per level, the table per problem."""
    commits = Counter(str(r.get("commit", "?"))[:10] for r in rows)
    dates = sorted(str(r.get("date", '')) for r in rows if r.get("date"))
    options = rows[0].get("options") or {}
    lines = [f"Judge's verdicts (`kcoder suite --results`{', ' + source if source else ''}): "
             f"{rows[0].get('device_name') or rows[0].get('device')}, torch "
             f"{', '.join(sorted({str(r.get('torch_version')) for r in rows}))}; kcoder "
             + ", ".join(f"{c} ({n})" for c, n in commits.most_common())
             + (f"; {dates[0]} to {dates[-1]}" if dates else "")
             + f"; budget {options.get('budget')} s, precision {options.get('precision')}, "
               f"allow {','.join(options.get('allow') or []) or 'none'}.", "",
             "| level | problems | verified | faster than eager | geomean vs eager | geomean vs compile "
             f"| >= {MARGIN}x vs compile | mean % SOL (kcoder / compile) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    levels = sorted({r.get("level") for r in rows}, key=lambda v: 99 if v is None else v)
    for level in levels:
        f = level_figures([r for r in rows if r.get("level") == level])
        name = "other" if level is None else level
        lines.append(f"| {name} | {f['problems']} | {_count(f['verified'], f['problems'])} "
                     f"| {_count(f['faster_than_eager'], f['problems'])} | {fmt_x(f['geomean_vs_eager'])} "
                     f"| {fmt_x(f['geomean_vs_compile'])} | {_count(f['at_margin_vs_compile'], f['problems'])} "
                     f"| {fmt_pct(f['mean_sol'], '')} / {fmt_pct(f['mean_compile_sol'], '')} |")
    lines += ["", "| level | problem | status | eager us | compile us | kernel us | vs eager | vs compile "
                  "| % SOL | compile % SOL |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        status = r.get("status", "?") if r.get("correct") else f"{r.get('status', '?')}: {str(r.get('reason'))[:80]}"
        lines.append(f"| {r.get('level') or '-'} | {r['name']} | {status} | {fmt_us(r.get('eager_us'))} "
                     f"| {fmt_us(r.get('compile_us'))} | {fmt_us(r.get('candidate_us'))} "
                     f"| {fmt_x(r.get('speedup_vs_eager'))} | {fmt_x(r.get('speedup_vs_compile'))} "
                     f"| {fmt_pct(r.get('candidate_sol_fraction'), '')} "
                     f"| {fmt_pct(r.get('compile_sol_fraction'), '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--device", help="rows of the device whose name contains this (default: the most rows)")
    parser.add_argument("--commit", help="rows of the commit that starts with this")
    parser.add_argument("--level", type=int, help="one level's rows")
    args = parser.parse_args(argv)
    rows = latest(read_rows(args.results), args.device, args.commit)
    if args.level is not None:
        rows = [r for r in rows if r.get("level") == args.level]
    if not rows:
        print("no rows match --device / --commit / --level", file=sys.stderr)
        return 1
    print(render(rows, ", ".join(p.name for p in args.results)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
