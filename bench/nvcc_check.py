"""Compile-check rendered CUDA candidates without a GPU: each file's CUDA_SOURCE (torch-free)
through nvcc for sm_90 with its CONFIG as -D flags, then per kernel the ptxas resource report
(registers, spills, stack) and, from the SASS, how many 16-byte global loads (LDG.E.128) and
local-memory accesses (LDL/STL) it has.

    python bench/nvcc_check.py DIR_OR_FILES... [--sass]
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CUOBJDUMP = shutil.which("cuobjdump") or os.environ.get("CUOBJDUMP", "cuobjdump")


def cuda_source(path: Path) -> tuple[str, dict[str, int]]:
    tree = ast.parse(path.read_text())
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("CUDA_SOURCE", "CONFIG"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    if "CUDA_SOURCE" not in found:
        raise SystemExit(f"{path}: no CUDA_SOURCE (not a cuda candidate of the built-in policy?)")
    return str(found["CUDA_SOURCE"]), dict(found.get("CONFIG", {}))  # type: ignore[arg-type]


def check(path: Path, sass: bool) -> bool:
    src, config = cuda_source(path)
    with tempfile.TemporaryDirectory() as tmp:
        unit, obj = Path(tmp) / "unit.cu", Path(tmp) / "unit.o"
        unit.write_text(src)
        flags = [f"-D{k}={v}" for k, v in config.items()]
        done = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-Xptxas", "-v", *flags, "-c",
                               str(unit), "-o", str(obj)], capture_output=True, text=True)
        if done.returncode:
            print(f"{path.name}: nvcc FAILED\n{done.stderr[-3000:]}")
            return False
        report = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers(.*?)\n", done.stderr, re.S)
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", done.stderr)
        dump = subprocess.run([CUOBJDUMP, "-sass", str(obj)], capture_output=True, text=True).stdout
        funcs = re.split(r"\n\s*Function : ", dump)[1:]
        counts = {}
        for f in funcs:
            name = f.split("\n", 1)[0].strip()
            counts[name] = (len(re.findall(r"LDG\.E\.128", f)), len(re.findall(r"LDG\.E", f)),
                            len(re.findall(r"\b(LDL|STL)\b", f)))
            if sass:
                print(f)
        print(f"{path.name}: CONFIG {config}")
        for (name, regs, _), sp in zip(report, spills, strict=False):
            v128, ldg, local = counts.get(name, (0, 0, 0))
            print(f"  {name[:60]:60} regs {regs:>3}  stack {sp[0]:>3}  spill {sp[1]}/{sp[2]}  "
                  f"LDG {ldg:>3} (128-bit {v128:>3})  LDL/STL {local}")
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--sass", action="store_true", help="print the SASS too")
    args = parser.parse_args()
    files = [q for p in args.paths for q in (sorted(p.glob("*.py")) if p.is_dir() else [p])]
    ok = [check(f, args.sass) for f in files]
    sys.exit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
