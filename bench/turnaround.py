"""Build turnaround: each example's solution built the plain load_inline way and the kcoder way,
cold and warm, side by side in one run; prints a table of seconds and ratios.

    python bench/turnaround.py [--device cuda|cpu] [--examples elementwise_chain,mse_loss]

Columns (seconds of the evaluator's build stage, i.e. until the first input could run):
  plain cold    fresh build directory, built exactly as plain load_inline builds it
  kcoder first  empty kcoder cache: no precompiled header yet, what a user meets once per flag
                set (the header is then built in the background for later builds); measured
                for the first example only
  kcoder cold   fresh build directory and object cache, precompiled header present (every
                later candidate)
  kcoder warm   the same candidate evaluated again (nothing rebuilt)
  next turn     the candidate with its kernel source edited (a comment added), as an agent's
                next turn changes it: the unchanged binding object is reused, not recompiled
Below the table, the compile steps of the plain and the kcoder cold build (from ninja's log)
show where a cold build's time goes.
Each kcoder cold build is also verified (5 input sets), so a fast build that produced a wrong
module would show as a failure, not as a speed.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.evaluate import EvalOptions, evaluate  # noqa: E402


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


def next_turn_copy(candidate: Path, folder: Path) -> Path:
    """The candidate with a comment added to its kernel source (CUDA_SOURCE, else CPP_SOURCE)."""
    text = candidate.read_text()
    marker = 'CUDA_SOURCE = r"""' if 'CUDA_SOURCE = r"""' in text else 'CPP_SOURCE = r"""'
    if marker not in text:
        raise SystemExit(f"{candidate}: no {marker} string to edit for the next-turn build")
    edited = folder / f"next_turn_{candidate.parent.name}.py"
    edited.write_text(text.replace(marker, marker + "\n// the agent's next turn\n", 1))
    return edited


def compile_steps(cache: Path) -> dict[str, float]:
    """Seconds of each step of the newest build under `cache`, from ninja's own log."""
    logs = sorted((cache / "build").glob("*/.ninja_log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return {}
    steps = {}
    for line in logs[-1].read_text().splitlines()[1:]:
        start, end, _, output, *_ = line.split("\t")
        kind = "link" if output.endswith(".so") else Path(output).name
        steps[kind] = (int(end) - int(start)) / 1000
    return steps


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
        plain_steps = compile_steps(work / f"plain-{name}")
        # kcoder's own cache lives on across examples (as it does for a user); only the
        # candidate's build directories are removed before a cold build.
        kcache = work / "kcoder"
        # Priming build: the first example's meets an empty kcoder cache ("kcoder first"); for
        # the others it only makes sure their own include block's header exists, as it would
        # for a user's later candidates.
        primed, _, _ = build_seconds(problem, candidate, args.device, kcache, fast=True)
        waited = wait_for_headers(kcache / "pch")
        first = primed if not rows else float("nan")
        shutil.rmtree(work / f"plain-{name}", ignore_errors=True)
        for folder in ("build", "objects"):
            shutil.rmtree(kcache / folder, ignore_errors=True)
        cold, _, note = build_seconds(problem, candidate, args.device, kcache, fast=True, stop_after="verify")
        cold_steps = compile_steps(kcache)
        warm, warm_wall, _ = build_seconds(problem, candidate, args.device, kcache, fast=True)
        turn, _, turn_note = build_seconds(problem, next_turn_copy(candidate, work), args.device, kcache,
                                           fast=True, stop_after="verify")
        rows.append((name, plain, first, cold, warm, warm_wall, turn, plain_steps, cold_steps))
        firsts = f"kcoder first {first:.1f} s (header ready {waited:.1f} s later), " if not math.isnan(first) else ""
        print(f"{name}: plain cold {plain:.1f} s, {firsts}"
              f"kcoder cold {cold:.1f} s, warm {warm:.2f} s, next turn {turn:.1f} s\n  {note}\n  {turn_note}",
              flush=True)
    print()
    header = (f"{'example':<20}{'plain cold':>11}{'kc first':>10}{'kc cold':>9}{'kc warm':>9}"
              f"{'warm eval':>11}{'next turn':>11}{'plain/kc cold':>15}{'plain/turn':>12}")
    print(header)
    print("-" * len(header))
    for name, plain, first, cold, warm, warm_wall, turn, _, _ in rows:
        first_cell = f"{first:>9.1f}s" if not math.isnan(first) else f"{'-':>10}"  # NaN: not measured
        print(f"{name:<20}{plain:>10.1f}s{first_cell}{cold:>8.1f}s{warm:>8.2f}s{warm_wall:>10.1f}s"
              f"{turn:>10.1f}s{plain / cold:>14.1f}x{plain / turn:>11.1f}x")
    print("(warm eval: wall time of a whole build-only evaluation, worker start and torch import included)")
    print("\ncompile steps, seconds (plain cold | kcoder cold); the two units compile in parallel")
    for name, *_, plain_steps, cold_steps in rows:
        cells = [f"{step} {plain_steps.get(step, float('nan')):.1f} | {cold_steps.get(step, 0.0):.1f}"
                 for step in sorted(plain_steps)]
        print(f"  {name:<20}" + ",  ".join(cells))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
