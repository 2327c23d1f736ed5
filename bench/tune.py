"""Does guided search beat brute force? For each example's solution on one device, print side by
side: the hand-picked CONFIG, the exhaustive optimum, and what TPE (model-based), evolution
(NSGA-II as a GA) and random search reach with a quarter of the exhaustive budget.

    python bench/tune.py --device cuda [--budget 1] [--seeds 20] [--examples softmax_rows,...]

The exhaustive pass judges every point live (kcoder's evaluator: built, verified, timed; its
best file is then verified as plain load_inline builds it and timed against torch.compile).
The guided strategies are then replayed over that measured table for --seeds seeds each: a
strategy proposing a point gets that point's measured time (or its invalidity), so the
comparison is of search efficiency, free of timing noise, and over many seeds rather than one
lucky run. Reported per strategy: median best time reached, how many seeds got within 2% of
the optimum, and the median trials it took them (trials count judged points, hand-picked first).
--live also runs each guided strategy once for real (seed 0) and prints what it found.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.evaluate import EvalOptions  # noqa: E402
from kcoder.tune.engine import PointResult, TuneOptions, TuneResult, tune  # noqa: E402
from kcoder.tune.space import config_key, load_space  # noqa: E402
from kcoder.verdict import Verdict  # noqa: E402

GUIDED = ("tpe", "evolution", "random")
WITHIN = 1.02


class Replay:
    """An evaluator that answers from an exhaustive run's table."""

    def __init__(self, table: dict[str, PointResult]) -> None:
        self.table = table

    def __call__(self, problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
        point = self.table[config_key(load_space(candidate).current)]
        v = Verdict(problem=str(problem), candidate=str(candidate), compiled=point.status != "build-failed")
        if not point.valid:
            return v.fail("verify", point.reason or point.status)
        v.correct, v.status, v.candidate_us = True, "accepted", point.time_us
        v.speedup_vs_eager = point.speedup_vs_eager
        return v


def trials_to_optimum(result: TuneResult, optimum: float) -> int | None:
    for p in sorted((p for p in result.points if p.trial), key=lambda p: p.trial):
        if p.valid and p.time_us <= optimum * WITHIN:  # type: ignore[operator]
            return p.trial
    return None


def replay(problem: Path, candidate: Path, strategy: str, budget: int, seeds: int,
           table: dict[str, PointResult], optimum: float) -> str:
    bests, hits = [], []
    for seed in range(seeds):
        with tempfile.TemporaryDirectory() as tmp:
            r = tune(problem, candidate, EvalOptions(), TuneOptions(strategy=strategy, trials=budget, seed=seed,
                     jobs=1, use_cache=False, plain_check=False), Path(tmp), evaluator=Replay(table))
        bests.append(r.best.time_us if r.best else math.inf)
        hit = trials_to_optimum(r, optimum)
        if hit is not None:
            hits.append(hit)
    med = statistics.median(bests)
    return (f"{strategy}: median best {med:.1f} us ({med / optimum:.3f}x opt), within 2% in "
            f"{len(hits)}/{seeds} seeds" + (f", median {statistics.median(hits):.0f} trials" if hits else ""))


def bench_one(folder: Path, args: argparse.Namespace) -> list[str]:
    problem, candidate = folder / "model.py", folder / f"solution_{args.device}.py"
    options = EvalOptions(device=args.device, timing_budget_s=args.budget, allow=["gemm"] if args.allow_gemm else [])
    with tempfile.TemporaryDirectory() as tmp:
        full = tune(problem, candidate, options, TuneOptions(strategy="exhaustive", use_cache=args.cache,
                    compare_compile=True), Path(tmp))
    lines = [f"{folder.name}: {len(full.points)} points, exhaustive took {full.seconds:.0f} s"]
    if full.best is None:
        return lines + ["  no valid point: " + "; ".join(f"{p.config} {p.reason}" for p in full.points[:3])]
    hand, best = full.hand_picked, full.best
    lines.append(f"  hand-picked {hand.config}: " + (f"{hand.time_us:.1f} us" if hand and hand.valid else
                                                     f"{hand.status if hand else '-'}"))
    final = full.final
    vs = final.speedup_vs_compile if final else None
    gain = full.speedup_over_hand_picked
    lines.append(f"  exhaustive optimum {best.config}: {best.time_us:.1f} us"
                 + (f" ({gain:.2f}x over hand-picked)" if gain else "")
                 + (f"; tuned file (plain build) vs torch.compile {vs:.2f}x" if vs else "")
                 + (f"; final check FAILED: {final.reason}" if final and not final.correct else ""))
    judged = [p for p in full.points if p.trial]
    budget = max(1, math.ceil(len(judged) / 4))
    table = {config_key(p.config): p for p in full.points}
    lines.append(f"  a quarter of the exhaustive budget: {budget} trials of {len(judged)}")
    for strategy in GUIDED:
        lines.append("  " + replay(problem, candidate, strategy, budget, args.seeds, table, best.time_us))
    if args.live:
        for strategy in ("tpe", "evolution"):
            with tempfile.TemporaryDirectory() as tmp:
                live = tune(problem, candidate, options, TuneOptions(strategy=strategy, trials=budget,
                            use_cache=False, plain_check=False), Path(tmp))
            got = live.best.time_us if live.best else math.inf
            lines.append(f"  live {strategy}: best {got:.1f} us ({got / best.time_us:.3f}x opt), "
                         f"trials to 2%: {trials_to_optimum(live, best.time_us)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--budget", type=float, default=1.0, help="timing seconds per point and implementation")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    parser.add_argument("--cache", action="store_true", help="reuse stored tuning results")
    parser.add_argument("--live", action="store_true", help="also run tpe and evolution live once")
    parser.add_argument("--allow-gemm", action="store_true")
    args = parser.parse_args()
    wanted = {e for e in args.examples.split(",") if e}
    report = []
    for folder in sorted(p.parent for p in (ROOT / "examples").glob(f"*/solution_{args.device}.py")):
        if wanted and folder.name not in wanted:
            continue
        lines = bench_one(folder, args)
        print("\n".join(lines), flush=True)
        report += lines
    print("\n" + "\n".join(report))


if __name__ == "__main__":
    main()
