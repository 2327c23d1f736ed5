"""Which rendered KernelBench problems a device call runs next (tests/gpu/device_session.sh kbsuite).

    python bench/kbslice.py KB --level 1 --solutions DIR --results FILE [--from 1 --to 50]
                            [--only 19,20] [--skip 95,97] [--max-mb 8000] [-n 16] [--device cuda]

KB holds level1/ level2/ of a KernelBench checkout; DIR the policy's candidates for that level
(bench/policy.py --emit DIR: DIR/<name>.py and DIR/footprints.json). Of the problems numbered
--from..--to (or --only), those with a candidate, not skipped, under --max-mb and without a
row in FILE for the same candidate, commit, device and options (the rule `kcoder suite
--results` skips by: ledger.pending), smallest footprint first, at most -n. Prints one line
each, "LEVEL FOOTPRINT_MB PROBLEM_FILE"; a one-line account on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.settings import Settings, parse_allow  # noqa: E402
from kcoder.suite import ledger  # noqa: E402
from kcoder.suite.command import settings_fields  # noqa: E402


def numbers(text: str | None) -> set[int]:
    return {int(n) for n in re.split(r"[,\s]+", text or "") if n}


def number(path: Path) -> int | None:
    found = re.match(r"(\d+)_", path.name)
    return int(found.group(1)) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kb", type=Path)
    parser.add_argument("--level", type=int, required=True)
    parser.add_argument("--solutions", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--from", dest="first", type=int, default=1)
    parser.add_argument("--to", dest="last", type=int, default=10**6)
    parser.add_argument("--only", help="problem numbers (comma or space separated)")
    parser.add_argument("--skip", help="problem numbers never taken")
    parser.add_argument("--max-mb", type=float, default=0.0, help="skip footprints above this (0: none)")
    parser.add_argument("-n", type=int, default=16, help="at most this many problems")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--allow", default="gemm,conv", help="as kcoder suite gets it (part of the rows' key)")
    parser.add_argument("--precision", default="strict")
    args = parser.parse_args()
    folder = args.kb / f"level{args.level}"
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no such folder (KB must hold level1/ level2/ of a KernelBench checkout)")
    fp_path = args.solutions / "footprints.json"
    footprints = json.loads(fp_path.read_text()) if fp_path.is_file() else {}
    only, skip = numbers(args.only), numbers(args.skip)
    chosen, big = [], 0
    for path in sorted(folder.glob("*.py")):
        n = number(path)
        if n is None or n in skip or (only and n not in only) or not (only or args.first <= n <= args.last):
            continue
        if not (args.solutions / path.name).is_file():
            continue  # not covered: the policy rendered nothing of its own
        if args.max_mb and (footprints.get(path.stem) or 0) > args.max_mb:
            big += 1
            continue
        chosen.append(path)
    specs = [{"name": p.stem, "problem": str(p), "solution_source": (args.solutions / p.name).read_text()}
             for p in chosen]
    settings = settings_fields(Settings(device=args.device, allow=parse_allow(args.allow), precision=args.precision))
    ident = ledger.identity(args.device, settings)
    todo, done = ledger.pending(specs, ledger.load(args.results), ident)
    todo.sort(key=lambda s: (footprints.get(s["name"]) or 0, number(Path(s["problem"]))))
    for spec in todo[: args.n]:
        print(args.level, footprints.get(spec["name"]) or 0, spec["problem"])
    print(f"level {args.level}: {len(chosen) + big} covered in the slice, {big} over --max-mb, {len(done)} already in "
          f"{args.results.name} ({ident['commit'][:12]}, {ident['device_name'] or '?'}), {len(todo)} to run, "
          f"taking {min(len(todo), args.n)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
