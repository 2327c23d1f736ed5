"""Which KernelBench problems a device call renders and judges next (device_session.sh kbsuite).

    python bench/kbslice.py KB --level 1 --results FILE --to-render [--from 1 --to 50] [--only 19,20] [--skip 95]
    python bench/kbslice.py KB --level 1 --results FILE --solutions DIR [--max-mb 8000] [-n 16] [same slice]

KB holds level1/ level2/ of a KernelBench checkout; FILE is the results log `kcoder suite
--results` keeps. The slice: the problems numbered --from..--to (or --only), less --skip.

--to-render prints the slice's problem files that FILE has not judged at this commit, device
and options (any candidate: the policy renders the same candidate for the same problem at the
same commit, so there is nothing new to render for those; with no commit known, or a dirty
one, every problem of the slice is printed).

--solutions DIR (bench/policy.py --emit DIR: DIR/<name>.py and DIR/footprints.json) prints
the slice's problems with a candidate, not over --max-mb, without a row in FILE for the same
candidate, commit, device and options (the rule `kcoder suite --results` skips by:
ledger.pending), smallest footprint first, at most -n: one line each, "LEVEL FOOTPRINT_MB
PROBLEM_FILE". A one-line account goes to stderr.
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


def slice_files(folder: Path, args: argparse.Namespace) -> list[Path]:
    only, skip = numbers(args.only), numbers(args.skip)
    out = []
    for path in sorted(folder.glob("*.py"), key=lambda p: (number(p) or 0, p.name)):
        n = number(path)
        if n is None or n in skip or (only and n not in only) or not (only or args.first <= n <= args.last):
            continue
        out.append(path)
    return out


def to_render(files: list[Path], rows: list[dict], ident: dict) -> list[Path]:
    """The files not judged at this commit, device and options (all of them when the commit
    says nothing about the code: unknown or dirty)."""
    if ident["commit"] == "unknown" or ident["commit"].endswith("+dirty"):
        return files
    setup = ledger.key({**ident, "name": None, "candidate_sha256": None})[2:]  # commit, device, options
    judged = {(r.get("name"), r.get("problem_sha256")) for r in rows
              if r.get("status") not in ledger.NOT_DONE and ledger.key(r)[2:] == setup}
    return [f for f in files if (f.stem, ledger.sha256(f.read_text())) not in judged]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kb", type=Path)
    parser.add_argument("--level", type=int, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--to-render", action="store_true", help="print the files to render (see above)")
    parser.add_argument("--solutions", type=Path, help="the rendered candidates: print the next problems to judge")
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
    if args.to_render == (args.solutions is not None):
        parser.error("give one of --to-render or --solutions DIR")
    folder = args.kb / f"level{args.level}"
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no such folder (KB must hold level1/ level2/ of a KernelBench checkout)")
    files = slice_files(folder, args)
    settings = settings_fields(Settings(device=args.device, allow=parse_allow(args.allow), precision=args.precision))
    ident = ledger.identity(args.device, settings)
    rows = ledger.load(args.results)
    where = f"{args.results.name} ({ident['commit'][:12]}, {ident['device_name'] or '?'})"
    if args.to_render:
        todo = to_render(files, rows, ident)
        print("\n".join(map(str, todo)))
        print(f"level {args.level}: {len(files)} in the slice, {len(files) - len(todo)} judged at this commit in "
              f"{where}, {len(todo)} to render", file=sys.stderr)
        return 0
    fp_path = args.solutions / "footprints.json"
    footprints = json.loads(fp_path.read_text()) if fp_path.is_file() else {}
    covered = [p for p in files if (args.solutions / p.name).is_file()]  # the rest: nothing of the policy's own
    chosen = [p for p in covered if not (args.max_mb and (footprints.get(p.stem) or 0) > args.max_mb)]
    specs = [{"name": p.stem, "problem": str(p), "solution_source": (args.solutions / p.name).read_text()}
             for p in chosen]
    todo, done = ledger.pending(specs, rows, ident)
    todo.sort(key=lambda s: (footprints.get(s["name"]) or 0, number(Path(s["problem"]))))
    for spec in todo[: args.n]:
        print(args.level, footprints.get(spec["name"]) or 0, spec["problem"])
    print(f"level {args.level}: {len(covered)} covered in the slice, {len(covered) - len(chosen)} over --max-mb, "
          f"{len(done)} already in {where}, {len(todo)} to run, taking {min(len(todo), args.n)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
