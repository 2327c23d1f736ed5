"""Compile-check rendered CUDA candidates without a GPU: each file's CUDA_SOURCE (torch-free)
through nvcc for sm_90 with its CONFIG as -D flags, then per kernel the ptxas resource report
(registers, spills, stack) and, from the SASS, how many 16-byte global loads (LDG.E.128) and
local-memory accesses (LDL/STL) it has. With --cpp, each file's CPP_SOURCE (the binding) too,
through g++ -fsyntax-only against torch's headers: a CPU wheel's headers do, with an empty stand-in
for the one generated header it lacks (c10/cuda/impl/cuda_cmake_macros.h).

    python bench/nvcc_check.py DIR_OR_FILES... [--sass] [--cpp]
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


def assigned(path: Path, names: tuple[str, ...]) -> dict[str, object]:
    """The literal values the file's top level assigns to `names`."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in names:
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def cuda_source(path: Path) -> tuple[str, dict[str, int]]:
    found = assigned(path, ("CUDA_SOURCE", "CONFIG"))
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
        # no cuobjdump (a toolkit without it, as this project's cpu machine): no SASS counts
        dump = subprocess.run([CUOBJDUMP, "-sass", str(obj)], capture_output=True, text=True).stdout \
            if shutil.which(CUOBJDUMP) else ""
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


def cpp_check(path: Path) -> bool:
    """CPP_SOURCE through g++ -fsyntax-only with torch's, Python's and CUDA's headers."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    source = assigned(path, ("CPP_SOURCE",)).get("CPP_SOURCE")
    if source is None:
        print(f"{path.name}: no CPP_SOURCE")
        return False
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    with tempfile.TemporaryDirectory() as tmp:
        stub = Path(tmp) / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("")  # searched last: a real one wins
        unit = Path(tmp) / "unit.cpp"
        unit.write_text(str(source))
        done = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=kcoder_check",
                               *[f"-I{p}" for p in include_paths()], f"-I{sysconfig.get_paths()['include']}",
                               f"-I{cuda_home}/include", f"-I{Path(tmp) / 'stub'}", str(unit)],
                              capture_output=True, text=True)
    if done.returncode:
        print(f"{path.name}: g++ FAILED on CPP_SOURCE\n{done.stderr[-3000:]}")
        return False
    print(f"{path.name}: CPP_SOURCE compiles")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--sass", action="store_true", help="print the SASS too")
    parser.add_argument("--cpp", action="store_true", help="check each CPP_SOURCE (the binding) too")
    args = parser.parse_args()
    files = [q for p in args.paths for q in (sorted(p.glob("*.py")) if p.is_dir() else [p])]
    ok = [check(f, args.sass) and (not args.cpp or cpp_check(f)) for f in files]
    sys.exit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
