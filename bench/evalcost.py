"""Where a verdict's time goes: `kcoder eval` on every example and a large problem, stage by
stage (Verdict.seconds), side by side with a naive in-process checker doing the same visible
work (5 seeded input sets against the reference, then eager, torch.compile and the candidate
each timed over 100 calls by the judge's Clock), in one run.

Per problem: kcoder's first verdict (baselines measured and cached; torch.compile may compile
cold), the naive checker (a fresh process; it finds Inductor's cache warm), then kcoder's next
verdict of the same pair (baselines reused: a tune point, a suite retry, an agent's next turn).
Builds are warmed first and not part of the comparison (device_session.sh `cost` prebuilds).

    python bench/evalcost.py --device cuda|cpu [--examples a,b] [--large-gb 4] [--no-large]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Stages shown (Verdict.seconds keys, stagetimes.ORDER), in a verdict's order.
SHOWN = ("sandbox", "reference_process_start", "reference_torch_import", "reference_first_call",
         "candidate_process_start", "candidate_torch_import", "candidate_compile", "candidate_import",
         "wait_for_reference", "candidate_init", "build", "verify_calls", "reference_outputs", "verify",
         "baselines", "baselines_eager", "baselines_compile", "sol", "candidate_restart", "candidate_timing",
         "judge_clock", "audits", "cross_checks", "timing", "total")
NAIVE = ("process_start", "torch_import", "build", "verify", "eager", "compile", "compile_first_call",
         "candidate", "total")


def kcoder_eval(problem: Path, solution: Path, device: str, fresh: bool) -> dict:
    """One `python -m kcoder eval --json`: its verdict plus the CLI's wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("KCODER_FRESH_BASELINES", None)
    if fresh:
        env["KCODER_FRESH_BASELINES"] = "1"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kcoder", "eval", str(problem), str(solution), "--device", device,
                           "--json"], capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    try:
        verdict = json.loads(proc.stdout)
    except ValueError:
        verdict = {"status": f"exit {proc.returncode}", "reason": proc.stderr[-300:], "seconds": {}}
    verdict["cli_wall"] = wall
    return verdict


def naive_check(problem: Path, solution: Path, device: str) -> dict:
    """The naive checker in a fresh process (this file with --naive); its stage seconds."""
    started = time.time()
    proc = subprocess.run([sys.executable, __file__, "--naive", str(problem), str(solution), "--device", device,
                           "--spawned", repr(started)], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr or proc.stdout)[-300:]}
    result = json.loads(lines[-1])
    result["total"] = time.time() - started
    return result


def naive_main(problem: Path, solution: Path, device: str, spawned: float) -> None:
    """Everything in one process, no sandbox, no second opinion: what the cost of checking
    itself is. The candidate is built through kcoder's build cache (warmed before)."""
    seconds = {"process_start": time.time() - spawned}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        seconds[name] = seconds.get(name, 0.0) + now - mark
        mark = now

    from kcoder.build import inline as build
    build.prepare_environment(device)
    import torch

    from kcoder.evaluate.candidate.worker import _copy_weights
    from kcoder.evaluate.harness.loading import load_module
    from kcoder.evaluate.harness.verify import make_inputs
    lap("torch_import")
    if device == "cuda":
        build.set_arch_for_device()
    build.install_build_wrapper(fast=True)
    prob = load_module(problem, "naive_problem")
    cand = load_module(solution, "naive_candidate")
    init = prob.get_init_inputs()
    torch.manual_seed(0)
    ref = prob.Model(*init).to(device)
    torch.manual_seed(0)
    new = cand.ModelNew(*init).to(device)
    _copy_weights(ref.state_dict(), new)  # as the candidate's process does: same names and shapes
    lap("build")
    with torch.no_grad():
        for seed in range(1, 6):
            inputs = make_inputs(prob, seed, device)
            expected = ref(*inputs)
            got = new(*inputs)
            seconds["mismatches"] = seconds.get("mismatches", 0) + (not torch.allclose(got, expected, 1e-4, 1e-5))
            del inputs, expected, got
        lap("verify")
        inputs = make_inputs(prob, 7, device)
        seconds["eager_us"] = _time_calls(torch, ref, inputs, device)
        lap("eager")
        compiled = torch.compile(ref)
        compiled(*inputs)
        _sync(torch, device)
        lap("compile_first_call")
        seconds["compile_us"] = _time_calls(torch, compiled, inputs, device)
        lap("compile")
        seconds["candidate_us"] = _time_calls(torch, new, inputs, device)
        lap("candidate")
    if device == "cuda":
        seconds["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(seconds), flush=True)


def _sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time_calls(torch, fn, inputs: list, device: str, calls: int = 100) -> float:
    """Median microseconds of `calls` calls after 3 warm-up calls, each timed by the judge's own
    Clock (L2 flushed, GPU head start, events; perf_counter on the cpu): the one clock of kcoder's
    figures, here too (the naive checker is naive in what it checks and where it runs, not in how
    it reads time)."""
    import statistics

    from kcoder.evaluate.harness.timing import Clock

    clock = Clock(device)
    for _ in range(3):
        fn(*inputs)
    clock.sync()
    times = []
    for _ in range(calls):
        out, read = clock.call(fn, inputs)
        clock.sync()
        times.append(read())
        del out
    return statistics.median(times)


def problems(args: argparse.Namespace, tmp: Path) -> list[tuple[str, Path, Path]]:
    chosen = {e for e in args.examples.split(",") if e}
    found = [(f.name, f / "model.py", f / f"solution_{args.device}.py")
             for f in sorted(p.parent for p in (ROOT / "examples").glob(f"*/solution_{args.device}.py"))
             if not chosen or f.name in chosen]
    if args.large_gb > 0 and args.device == "cuda":
        from bench.memory import BIG_PROBLEM, BIG_SOLUTION

        cols = int(args.large_gb * 2**30 / 4 / 4096)
        gib = 4096 * cols * 4 / 2**30
        problem, solution = tmp / "large_axpb.py", tmp / "large_axpb_new.py"
        problem.write_text(BIG_PROBLEM.format(cols=cols, gb=gib))
        solution.write_text(BIG_SOLUTION)
        found.append((f"axpb_{gib:.0f}GiB", problem, solution))
    return found


def _cell(value) -> str:
    return f"{value:8.2f}" if isinstance(value, (int, float)) else f"{'-':>8}"


def stage_table(rows: list[tuple[str, dict, dict, dict]]) -> list[str]:
    """Rows: stages; columns per problem: kcoder's first verdict, its next one, the naive checker."""
    head = f"{'stage (seconds)':26}" + "".join(f" {n[:8]:>8} {'next':>8} {'naive':>8}" for n, *_ in rows)
    lines = [head]
    for stage in SHOWN + ("cli_wall",):
        cells = "".join(f" {_cell(first['seconds'].get(stage, first.get(stage)))}"
                        f" {_cell(nxt['seconds'].get(stage, nxt.get(stage)))} {'':>8}" for _, first, nxt, _ in rows)
        lines.append(f"{stage:26}{cells}")
    for stage in NAIVE:
        lines.append(f"{'naive ' + stage:26}" + "".join(f" {'':>8} {'':>8} {_cell(naive.get(stage))}"
                                                       for *_, naive in rows))
    return lines


def summary(rows: list[tuple[str, dict, dict, dict]], device_name: str) -> list[str]:
    lines = [f"device: {device_name}",
             f"{'problem':18} {'footprint':>9} {'peak/fp':>7} {'first s':>8} {'next s':>8} {'naive s':>8}"
             f" {'eager us':>9} {'compile':>9} {'cand us':>9}  verdict (next)"]
    for name, first, nxt, naive in rows:
        fp, peak = nxt.get("footprint_mb"), nxt.get("peak_memory_mb")
        ratio = f"{peak / fp:7.2f}" if fp and peak else f"{'-':>7}"
        lines.append(f"{name[:18]:18} {fp or 0:9.0f} {ratio} {first['cli_wall']:8.1f} {nxt['cli_wall']:8.1f} "
                     f"{_cell(naive.get('total'))} {nxt.get('eager_us') or 0:9.1f} {nxt.get('compile_us') or 0:9.1f} "
                     f"{nxt.get('candidate_us') or 0:9.1f}  {nxt.get('status')}: {str(nxt.get('reason'))[:60]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    parser.add_argument("--large-gb", type=float, default=3.0, help="the large problem's input (cuda; 0: none)")
    parser.add_argument("--deadline-s", type=float, default=0.0,
                        help="start no further problem after this many seconds (0: none); the tables still print")
    parser.add_argument("--naive", nargs=2, type=Path, metavar=("PROBLEM", "SOLUTION"), help=argparse.SUPPRESS)
    parser.add_argument("--spawned", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.naive:
        naive_main(*args.naive, args.device, args.spawned or time.time())
        return
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kcoder-evalcost-") as tmp:
        for name, problem, solution in problems(args, Path(tmp)):
            if args.deadline_s and time.monotonic() - started > args.deadline_s:
                print(f"{name}: skipped (past --deadline-s {args.deadline_s:.0f})", flush=True)
                continue
            first = kcoder_eval(problem, solution, args.device, fresh=True)  # measures and caches the baselines
            naive = naive_check(problem, solution, args.device)
            nxt = kcoder_eval(problem, solution, args.device, fresh=False)
            rows.append((name, first, nxt, naive))
            print(f"{name}: first {first['cli_wall']:.1f} s ({first.get('status')}), naive "
                  f"{naive.get('total', float('nan')):.1f} s {naive.get('error', '')}, next {nxt['cli_wall']:.1f} s "
                  f"({nxt.get('status')}: {str(nxt.get('reason'))[:80]})", flush=True)
    device_name = next((r[2].get("device_name") for r in rows if r[2].get("device_name")), args.device)
    print("\n" + "\n".join(stage_table(rows)))
    print("\n" + "\n".join(summary(rows, device_name)))


if __name__ == "__main__":
    main()
