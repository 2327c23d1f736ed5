"""What the trust boundary costs: wall time of `kcoder eval` on every example, the evaluator
before (an older checkout of kcoder, passed with --before) and this one, alternating in one
run so both see the same machine. Builds are warmed first (not timed), so the figures are
the evaluation itself: process starts, verification, timing.

    git worktree add /tmp/kcoder-before bab607d      # the evaluator before issue 15
    python bench/evalcost.py --before /tmp/kcoder-before [--device cpu|cuda] [--repeat 2] [--examples a,b]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_eval(checkout: Path, problem: Path, solution: Path, device: str) -> tuple[float, str]:
    """Seconds of one `python -m kcoder eval` with `checkout` first on PYTHONPATH, and its reason."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kcoder", "eval", str(problem), str(solution), "--device", device,
                           "--json"], capture_output=True, text=True, env=env, cwd=checkout)
    seconds = time.perf_counter() - started
    reason = proc.stdout.split('"reason": ', 1)[-1].split("\n", 1)[0][:60] if proc.stdout else proc.stderr[-200:]
    return seconds, f"exit {proc.returncode} {reason}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="checkout of the earlier kcoder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    args = parser.parse_args()
    chosen = {e for e in args.examples.split(",") if e}
    sides = {"before": args.before.resolve(), "after": ROOT}
    rows = []
    for folder in sorted(p.parent for p in (ROOT / "examples").glob(f"*/solution_{args.device}.py")):
        if chosen and folder.name not in chosen:
            continue
        problem, solution = folder / "model.py", folder / f"solution_{args.device}.py"
        for side, checkout in sides.items():  # warm builds and compile caches, untimed
            print(f"warm-up {folder.name} {side}: {run_eval(checkout, problem, solution, args.device)[1]}", flush=True)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.repeat):
            for side, checkout in sides.items():
                seconds, outcome = run_eval(checkout, problem, solution, args.device)
                times[side].append(seconds)
                print(f"  {folder.name} {side}: {seconds:.1f} s ({outcome})", flush=True)
        before, after = statistics.median(times["before"]), statistics.median(times["after"])
        rows.append(f"{folder.name:20} {before:10.1f} {after:10.1f} {after / before:8.2f}x")
    print(f"\n{'example':20} {'before s':>10} {'after s':>10} {'after/before':>10}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
