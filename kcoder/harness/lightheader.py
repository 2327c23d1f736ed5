"""A lighter torch header for the binding unit, used only where it cannot change the code.

load_inline starts main.cpp with `#include <torch/extension.h>`, which is torch/all.h (every
C++-frontend header: torch::nn, optim, data, serialize, jit) plus torch/python.h (pybind11,
the Tensor casters, and torch::python's nn.Module bindings). GCC instantiates, at the end of
every translation unit, each template that any parsed inline function uses, so a binding
unit pays for the whole frontend even when it names none of it: measured with a .gch, an
empty file that includes torch/extension.h took 6.5 s, the same with the frontend left out 4.6 s.

The light header is exactly torch/extension.h's own include list, read from the installed
torch, without the frontend headers. It is used for a binding only when
- the file names no frontend namespace (`nn::`, `optim::`, `data::`, `serialize::`,
  `jit::`, `python::`), and
- the file uses no identifier (or macro) that only the full header brings in: that set is
  the difference of the two headers' preprocessed tokens, computed once per compiler, flags
  and torch (two preprocessor runs, about 3 s on 2 cores).
Anything else the frontend adds (another overload of a name the light header also has) takes
frontend types as arguments, which such a file cannot create. A build that still fails with
the light header is built again with the full one (fastbuild's fallback), so the verdict and
the compiler messages a user sees are those of plain load_inline.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

EXTENSION_INCLUDE = "#include <torch/extension.h>"
LIGHT_MAIN_SOURCE = "kcoder_light_main.cpp"
TOKENS_FILE = "full_only_tokens.txt"
TOKENS_TIMEOUT_S = 300
# The C++ frontend: every header here declares only its own namespace's names.
FRONTEND_HEADERS = {"torch/nn.h", "torch/optim.h", "torch/data.h", "torch/serialize.h", "torch/jit.h",
                    "torch/nn/module.h"}
_NAMES_FRONTEND = re.compile(r"\b(nn|optim|data|serialize|jit|python)\s*::")
_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>\s*$')
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def light_includes(include_dirs: list[str]) -> list[str] | None:
    """torch/extension.h's include lines without the frontend, or None when the installed
    torch's extension.h is not the all.h + python.h pair this is written for."""
    found = {name: _find(include_dirs, name) for name in ("torch/extension.h", "torch/all.h", "torch/python.h")}
    if None in found.values():
        return None
    if _includes_of(found["torch/extension.h"]) != ["torch/all.h", "torch/python.h"]:
        return None
    kept: list[str] = []
    for name in _includes_of(found["torch/all.h"]) + _includes_of(found["torch/python.h"]):
        line = f"#include <{name}>"
        if name not in FRONTEND_HEADERS and line not in kept:
            kept.append(line)
    return kept


def _find(include_dirs: list[str], name: str) -> Path | None:
    for folder in include_dirs:
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def _includes_of(header: Path) -> list[str]:
    """The <...> includes of a torch header, in order (its #error branch has none)."""
    return [m.group(1) for line in header.read_text().splitlines() if (m := _INCLUDE.match(line))]


def rewrite_main(main_text: str, block: list[str]) -> str:
    """main.cpp with each `#include <torch/extension.h>` of its leading include block blanked
    (same line count); the light header, force-included, stands in for them."""
    lines = main_text.split("\n")
    remaining = sum(1 for line in block if line == EXTENSION_INCLUDE)
    for i, line in enumerate(lines):
        if remaining == 0:
            break
        if line.strip() == EXTENSION_INCLUDE:
            lines[i] = "// kcoder: torch/extension.h without the C++ frontend is force-included"
            remaining -= 1
    return "\n".join(lines)


def blocking_name(main_text: str, full_only: set[str]) -> str | None:
    """The first name in the file that needs the full header, if any."""
    m = _NAMES_FRONTEND.search(main_text)
    if m:
        return m.group(0).replace(" ", "")
    return next((tok for tok in _IDENTIFIER.findall(main_text) if tok in full_only), None)


def full_only_tokens(folder: Path, cxx: str, flags: list[str], light: list[str]) -> set[str] | None:
    """The identifiers only the full header's preprocessed text has; computed the first time
    (by a detached job that concurrent builds share and wait for). None if that failed."""
    done = folder / TOKENS_FILE
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists() and not _tokens_building(folder) and not tokens_failed(folder):
            _start_tokens(folder, cxx, flags, light)
    deadline = time.monotonic() + TOKENS_TIMEOUT_S
    while not done.exists() and _tokens_building(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    return set(done.read_text().split()) if done.exists() else None


def _tokens_building(folder: Path) -> bool:
    try:
        return time.time() - (folder / "tokens-building").stat().st_mtime < TOKENS_TIMEOUT_S + 60
    except FileNotFoundError:
        return False


def _start_tokens(folder: Path, cxx: str, flags: list[str], light: list[str]) -> None:
    """Preprocess both headers and diff their identifiers, detached (like the .gch build)."""
    done = folder / TOKENS_FILE
    marker = folder / "tokens-building"
    marker.write_text(str(time.time()))
    (folder / "full.h").write_text(EXTENSION_INCLUDE + "\n")
    (folder / "light.h").write_text("\n".join(light) + "\n")
    q = {n: shlex.quote(str(folder / n)) for n in ("full.h", "light.h", "full.i", "light.i", "log",
                                                     "tokens-failed", "tokens-building")}
    pre = shlex.join([cxx, *flags, "-E", "-dD", "-x", "c++"])
    diff = shlex.join([sys.executable, "-m", "kcoder.harness.lightheader", str(folder / "full.i"),
                       str(folder / "light.i"), str(done)])
    script = (f"(timeout {TOKENS_TIMEOUT_S} {pre} {q['full.h']} -o {q['full.i']} &&"
              f" timeout {TOKENS_TIMEOUT_S} {pre} {q['light.h']} -o {q['light.i']} && {diff}) > {q['log']} 2>&1"
              f" || cp {q['log']} {q['tokens-failed']}; rm -f {q['full.i']} {q['light.i']} {q['tokens-building']}")
    subprocess.Popen(["sh", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tokens_failed(folder: Path) -> bool:
    return (folder / "tokens-failed").exists()


def tokens_folder(root: Path, cxx: str, identity: str, flags: list[str], light: list[str], torch_id: str) -> Path:
    material = "\n".join([cxx, identity, *flags, "--", *light, torch_id])
    folder = root / "light" / hashlib.sha256(material.encode()).hexdigest()[:20]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_difference(full_i: str, light_i: str, out: str) -> None:
    """Identifiers of the full preprocessed header (macro names included: -dD keeps the
    #defines) that the light one lacks; written whole, then renamed into place."""
    full, light = _tokens(Path(full_i)), _tokens(Path(light_i))
    tmp = Path(out + ".tmp")
    tmp.write_text("\n".join(sorted(full - light)) + "\n")
    tmp.replace(out)


def _tokens(preprocessed: Path) -> set[str]:
    """Identifiers of a `-E -dD` output; line markers (`# 12 "/path/torch/nn/..."`) name files,
    not code, so they are skipped."""
    found: set[str] = set()
    for line in preprocessed.read_text(errors="replace").splitlines():
        if not line.startswith("# "):
            found.update(_IDENTIFIER.findall(line))
    return found


if __name__ == "__main__":
    write_difference(*sys.argv[1:4])
