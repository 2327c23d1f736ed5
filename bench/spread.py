"""Evaluate the same candidate N times (fresh worker each) and print the spread of its
speed-ups: how reproducible is a verdict?

    python bench/spread.py [PROBLEM CANDIDATE] [--device cuda] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.evaluate import EvalOptions, evaluate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("problem", nargs="?", default=str(ROOT / "examples/elementwise_chain/model.py"))
    parser.add_argument("candidate", nargs="?", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", type=float, default=2.0)
    args = parser.parse_args()
    candidate = args.candidate or str(Path(args.problem).parent / f"solution_{args.device}.py")
    rows = []
    for i in range(args.runs):
        v = evaluate(args.problem, candidate, EvalOptions(device=args.device, timing_budget_s=args.budget))
        if not v.correct:
            print(f"run {i + 1}: rejected: {v.reason}")
            sys.exit(1)
        rows.append(v)
        print(f"run {i + 1}: eager {v.eager_us:9.1f} us  compile {v.compile_us:9.1f} us  "
              f"candidate {v.candidate_us:9.1f} us  vs eager {v.speedup_vs_eager:.3f}x  "
              f"vs compile {v.speedup_vs_compile:.3f}x  rounds {v.timing_rounds}", flush=True)
    for label, key in (("vs eager", "speedup_vs_eager"), ("vs compile", "speedup_vs_compile")):
        values = [getattr(v, key) for v in rows]
        mean = statistics.mean(values)
        spread = (max(values) - min(values)) / mean
        print(f"SPREAD {label}: mean {mean:.3f}x  min {min(values):.3f}  max {max(values):.3f}  "
              f"(max-min)/mean {100 * spread:.1f}%  stdev {statistics.pstdev(values):.3f}")


if __name__ == "__main__":
    main()
