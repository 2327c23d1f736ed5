"""A suite's figures in the papers' terms (KernelBench, CUDA Agent), from its records.

Over all problems: compiled %, correct %, faster than eager % (correct and > 1.0x), faster
than torch.compile at 1.05x % (correct and > 1.05x), fast_p (correct and speed-up > p) vs
eager and vs compile; over correct, timed problems: geomean speed-ups and the mean share of
the speed of light; time and cost per problem.
"""

from __future__ import annotations

import math
from typing import Any

from kcoder.verdict import Verdict

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
COMPILE_MARGIN = 1.05


def verdict_of(record: dict[str, Any]) -> Verdict | None:
    """A record's verdict as a Verdict (records travel and are kept as JSON); None when the
    task ended before one (a missing solution, a scheduler failure). A field this kcoder does
    not know raises: a renamed field fails loudly instead of reading as missing."""
    data = record.get("verdict")
    return Verdict.from_dict(data, strict=True) if data else None


def row(record: dict[str, Any]) -> dict[str, Any]:
    """One problem's row of the tables: its status and figures (None where unknown)."""
    found = verdict_of(record)
    v = found or Verdict()  # no verdict: nothing compiled, nothing correct, no figures
    return {
        "name": record["name"], "status": record.get("status", "error"),
        "compiled": v.compiled, "correct": v.correct, "reward": found.reward if found else None,
        "eager_us": v.eager_us, "compile_us": v.compile_us, "candidate_us": v.candidate_us,
        "speedup_vs_eager": v.speedup_vs_eager, "speedup_vs_compile": v.speedup_vs_compile,
        "sol_us": v.sol_us or (record.get("reference") or {}).get("sol_us"),
        "candidate_sol_fraction": v.candidate_sol_fraction,
        "compile_sol_fraction": v.compile_sol_fraction,
        "seconds": record.get("seconds"), "cost": record.get("cost") or 0.0, "slot": record.get("slot", ""),
        "reason": (record.get("reason") or v.reason or "")[:200],
    }


def _pct(count: int, total: int) -> float:
    return round(100.0 * count / total, 1) if total else 0.0


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 4) if values else None


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def fast_p(rows: list[dict[str, Any]], key: str, p: float) -> float:
    """Share (%) of all problems that are correct and more than p times faster (fast_0: correct,
    timed or not, as in KernelBench)."""
    return _pct(sum(1 for r in rows if r["correct"] and (p == 0 or (r[key] or 0.0) > p)), len(rows))


OUT_OF_REACH = "out_of_reach"  # the preflight found torch.compile at the hardware limit: nothing to win


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The suite's summary figures (see the module docstring). A problem out of reach is its
    own outcome, counted apart: not a failure, and not in the shares over the problems."""
    total = len(rows)
    rows = [r for r in rows if r["status"] != OUT_OF_REACH]
    n, out_of_reach = len(rows), total - len(rows)
    correct = [r for r in rows if r["correct"]]
    timed = [r for r in correct if r["speedup_vs_eager"] is not None]
    return {
        "problems": total, "out_of_reach": out_of_reach,
        "compiled": sum(r["compiled"] for r in rows), "correct": len(correct),
        "compiled_pct": _pct(sum(r["compiled"] for r in rows), n), "correct_pct": _pct(len(correct), n),
        "faster_than_eager_pct": fast_p(rows, "speedup_vs_eager", 1.0),
        "faster_than_compile_pct": fast_p(rows, "speedup_vs_compile", COMPILE_MARGIN),
        "geomean_speedup_vs_eager": _geomean([r["speedup_vs_eager"] for r in timed]),
        "geomean_speedup_vs_compile": _geomean([r["speedup_vs_compile"] for r in timed]),
        "fast_p_vs_eager": {str(p): fast_p(rows, "speedup_vs_eager", p) for p in FAST_P},
        "fast_p_vs_compile": {str(p): fast_p(rows, "speedup_vs_compile", p) for p in FAST_P},
        "mean_sol_fraction": _mean([r["candidate_sol_fraction"] for r in timed]),
        "mean_compile_sol_fraction": _mean([r["compile_sol_fraction"] for r in timed]),
        "seconds_per_problem": _mean([r["seconds"] for r in rows]),
        "cost_per_problem": round(sum(r["cost"] for r in rows) / n, 4) if n else 0.0,
        "statuses": {s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})}
        | ({OUT_OF_REACH: out_of_reach} if out_of_reach else {}),
    }
