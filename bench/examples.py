"""Evaluate every example's solution on one device and print speed-ups vs eager and
torch.compile as a table.

    python bench/examples.py --device cuda [--budget 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.evaluate import EvalOptions, evaluate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget", type=float, default=2.0)
    parser.add_argument("--allow", default="")
    args = parser.parse_args()
    allow = [a for a in args.allow.split(",") if a]
    header = (f"{'example':22} {'eager us':>10} {'compile us':>11} {'kernel us':>10} "
              f"{'vs eager':>9} {'vs compile':>11} reward")
    lines = [header]
    for folder in sorted(p.parent for p in (ROOT / "examples").glob(f"*/solution_{args.device}.py")):
        v = evaluate(folder / "model.py", folder / f"solution_{args.device}.py",
                     EvalOptions(device=args.device, timing_budget_s=args.budget, allow=allow))
        if not v.correct:
            lines.append(f"{folder.name:22} REJECTED: {v.reason}")
        else:
            lines.append(f"{folder.name:22} {v.eager_us:10.1f} {v.compile_us:11.1f} {v.candidate_us:10.1f} "
                         f"{v.speedup_vs_eager:8.2f}x {v.speedup_vs_compile:10.2f}x {v.reward:>6}"
                         f"   CI vs compile {v.speedup_vs_compile_ci}")
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
