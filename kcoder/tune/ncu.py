"""Nsight Compute metrics for the fastest few points of a tuning run (cuda).

ncu replays every kernel many times, so profiling each point would cost more than the search
itself; the best few are where the numbers steer the next decision (is the winner memory
bound? is occupancy what limits it?). Each profile is `kcoder profile`'s own path
(profile.profiler.profile_candidate), run after the search so it never overlaps a timed point.
A point with several kernels is summarised by its kernels weighted by their duration: the
figures then describe where the point's time goes. When ncu cannot run (missing, no counter
permission, a CPU build of torch) the run says so in one note and the columns stay empty.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# The engine calls in here after its search, so its PointResult/TuneResult are duck-typed here
# (`Any`): importing them back, even for type checking, would be an import cycle.
PointResult = TuneResult = Any

DEFAULT_TOP = 3
Profiler = Callable[[Path, Path], Any]  # (problem, candidate) -> profile.profiler.ProfileReport


def run_profiler(problem: Path, candidate: Path, sandbox: str = "auto") -> Any:
    """kcoder's profiler with the defaults `kcoder profile` uses (imported on first use): the
    point runs confined in its box, as every profile's target does (profile/targetbox.py)."""
    from kcoder.profile.options import ProfileOptions
    from kcoder.profile.profiler import profile_candidate

    return profile_candidate(problem, candidate, ProfileOptions(calibrate=False, sandbox=sandbox))


def summarise(kernels: list[Any]) -> dict[str, Any]:
    """Duration-weighted occupancy, DRAM and SM throughput, and the stall that costs the most
    cycles, over one forward's kernels (profile.ncu_parse.KernelMetrics)."""
    timed = [k for k in kernels if k.duration_ns]
    if not timed:
        return {}
    total = sum(k.duration_ns for k in timed)

    def weighted(attr: str) -> float | None:
        have = [k for k in timed if getattr(k, attr) is not None]
        if not have:
            return None
        span = sum(k.duration_ns for k in have)
        return round(sum(getattr(k, attr) * k.duration_ns for k in have) / span, 1)

    stalls: dict[str, float] = {}
    for k in timed:
        for reason, cycles in k.stalls:
            stalls[reason] = stalls.get(reason, 0.0) + cycles * k.duration_ns / total
    top = max(stalls, key=stalls.__getitem__) if stalls else None
    return {"occupancy_pct": weighted("achieved_occupancy_pct"), "dram_pct": weighted("dram_pct"),
            "sm_pct": weighted("sm_pct"), "top_stall": top, "kernels": len(timed),
            "kernel_us": round(total / 1e3, 2)}


def profile_best(result: TuneResult, work_dir: Path, top: int = DEFAULT_TOP,
                 profiler: Profiler | None = None) -> None:
    """Fill `ncu` of the `top` fastest valid points (in place); notes say what could not run."""
    profile = profiler or run_profiler
    best = sorted((p for p in result.points if p.valid), key=lambda p: p.time_us or 0.0)[:top]
    for point in best:
        report = profile(Path(result.problem), _point_file(point, result, work_dir))
        if report.mode != "ncu":
            why = report.messages[0] if report.messages else report.error or f"profile mode {report.mode}"
            result.notes.append(f"no Nsight Compute metrics: {why}")
            return  # the same reason would stop every other point too
        point.ncu = summarise(report.kernels)


def _point_file(point: PointResult, result: TuneResult, work_dir: Path) -> Path:
    """The point's file: the judged one, or (a point from the cache) the candidate rewritten."""
    if point.file and Path(point.file).is_file():
        return Path(point.file)
    from kcoder.tune.space import load_space

    folder = work_dir / "points"
    folder.mkdir(parents=True, exist_ok=True)
    name = "profiled_" + "_".join(f"{k}{v}" for k, v in point.config.items())
    path = folder / f"{''.join(c if c.isalnum() or c in '_-' else '-' for c in name)[:120]}.py"
    path.write_text(load_space(result.candidate).rewrite(point.config))
    return path


def table_cells(point: PointResult) -> list[str]:
    """The table's ncu columns for one point: occupancy, DRAM, SM, top stall."""
    m = point.ncu or {}

    def pct(key: str) -> str:
        return "-" if m.get(key) is None else f"{m[key]:.0f}"

    return [pct("occupancy_pct"), pct("dram_pct"), pct("sm_pct"), m.get("top_stall") or "-"]


NCU_HEAD = ["occ %", "dram %", "sm %", "top stall"]
