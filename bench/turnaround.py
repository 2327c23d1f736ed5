"""Build turnaround: each example's solution built the plain load_inline way and the kcoder way,
cold and warm, side by side in one run; prints a table of seconds and ratios.

    python bench/turnaround.py [--device cuda|cpu] [--examples elementwise_chain,mse_loss]

Columns (seconds of the evaluator's build stage, i.e. until the first input could run):
  plain cold    fresh build directory, built exactly as plain load_inline builds it
  kcoder first  fresh build directory and no precompiled header yet: what a user meets once
                per flag set (the header is then built in the background for later builds)
  kcoder cold   fresh build directory, precompiled header present (every later candidate)
  kcoder warm   the same candidate evaluated again (nothing rebuilt)
Each kcoder cold build is also verified (5 input sets), so a fast build that produced a wrong
module would show as a failure, not as a speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.harness import EvalOptions, evaluate  # noqa: E402


def build_seconds(problem: Path, candidate: Path, device: str, cache: Path, *, fast: bool,
                  stop_after: str = "build", pch: str = "background") -> tuple[float, float, str]:
    """(build-stage seconds, wall seconds of the whole evaluation, build note) for one run."""
    os.environ["KCODER_CACHE"] = str(cache)
    os.environ["KCODER_PCH"] = pch
    started = time.perf_counter()
    verdict = evaluate(problem, candidate, EvalOptions(device=device, stop_after=stop_after, fast_build=fast))
    wall = time.perf_counter() - started
    if not verdict.compiled or (stop_after == "verify" and not verdict.correct):
        raise SystemExit(f"{candidate}: {verdict.reason}")
    note = next((n for n in verdict.notes if n.startswith("extension ")), "")
    return verdict.seconds.get("build", float("nan")), wall, note


def wait_for_headers(folder: Path, limit_s: float = 900.0) -> float:
    """Wait until no precompiled header under `folder` is still being built; seconds waited."""
    started = time.perf_counter()
    while any(folder.glob("*/building")) and time.perf_counter() - started < limit_s:
        time.sleep(0.2)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when a GPU is present)")
    parser.add_argument("--examples", default=None, help="comma-separated example names (default: all)")
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    names = args.examples.split(",") if args.examples else sorted(p.name for p in (ROOT / "examples").iterdir()
                                                                   if (p / "model.py").exists())
    work = Path(tempfile.mkdtemp(prefix="kcoder-turnaround-"))
    print(f"device {args.device}, {os.cpu_count()} CPUs, caches under {work}", flush=True)
    rows = []
    for name in names:
        problem = ROOT / "examples" / name / "model.py"
        candidate = ROOT / "examples" / name / f"solution_{args.device}.py"
        plain, _, _ = build_seconds(problem, candidate, args.device, work / f"plain-{name}", fast=False)
        # kcoder's own cache lives on across examples (as it does for a user); only the
        # candidate's build directory is removed before a cold build.
        kcache = work / "kcoder"
        first, _, _ = build_seconds(problem, candidate, args.device, work / f"first-{name}", fast=True)
        waited = wait_for_headers(work / f"first-{name}" / "pch")
        (kcache / "pch").mkdir(parents=True, exist_ok=True)
        for entry in (work / f"first-{name}" / "pch").iterdir():
            if not (kcache / "pch" / entry.name).exists():
                entry.rename(kcache / "pch" / entry.name)
        shutil.rmtree(work / f"first-{name}", ignore_errors=True)
        shutil.rmtree(work / f"plain-{name}", ignore_errors=True)
        shutil.rmtree(kcache / "build", ignore_errors=True)
        cold, _, note = build_seconds(problem, candidate, args.device, kcache, fast=True, stop_after="verify")
        warm, warm_wall, _ = build_seconds(problem, candidate, args.device, kcache, fast=True)
        rows.append((name, plain, first, cold, warm, warm_wall, note))
        print(f"{name}: plain cold {plain:.1f} s, kcoder first {first:.1f} s (header ready {waited:.1f} s later), "
              f"kcoder cold {cold:.1f} s, "
              f"warm {warm:.2f} s | {note}", flush=True)
    print()
    header = (f"{'example':<20}{'plain cold':>11}{'kc first':>10}{'kc cold':>9}{'kc warm':>9}"
              f"{'warm eval':>11}{'plain/kc cold':>15}")
    print(header)
    print("-" * len(header))
    for name, plain, first, cold, warm, warm_wall, _ in rows:
        print(f"{name:<20}{plain:>10.1f}s{first:>9.1f}s{cold:>8.1f}s{warm:>8.2f}s{warm_wall:>10.1f}s"
              f"{plain / cold:>14.1f}x")
    print("(warm eval: wall time of a whole build-only evaluation, worker start and torch import included)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
