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
  `jit::`, `python::`);
- the file names no macro that only the full header defines (`TORCH_MODULE`, `TORCH_ARG`,
  ...: an `#ifdef` on one would silently read differently). That set is the difference of
  the two headers' `-E -dD` macro definitions, found once per compiler, flags and torch (two
  preprocessor runs, about 3 s on 2 cores);
- the file uses none of the few names the frontend declares directly in namespace torch, at
  or c10 (FRONTEND_TOP_LEVEL: save, load, OrderedDict, ...), which could otherwise resolve
  to another declaration reached through torch's using-directives.
Any other name only the frontend declares fails to compile with the light header, and a
build that fails with it is built again with the full one (fastbuild's fallback) when its
errors can come from a missing declaration of a name the full header spells (the scan also
lists every identifier of the full preprocessed header): a syntax error, or a name neither
header spells (`undeclared_thing`), is reported after one compile. What compiles
with both reads the same: the frontend's other declarations are overloads and
specializations for frontend types, which a file that names none of them cannot create.
(Other full-only identifiers are not checked: common words such as `rows` occur in frontend
headers as parameter names and would send honest bindings to the slow path for nothing.)
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shlex
import sys
import time
from pathlib import Path

from kcoder.build import detached
from kcoder.procs import child_env

EXTENSION_INCLUDE = "#include <torch/extension.h>"
LIGHT_MAIN_SOURCE = "kcoder_light_main.cpp"
MACROS_FILE = "full_only_macros.txt"
NAMES_FILE = "full_names.txt"
SCAN_VERSION = "2"  # 2: the scan also writes NAMES_FILE
MACROS_TIMEOUT_S = 300
# The C++ frontend: every header here declares only its own namespace's names.
FRONTEND_HEADERS = {"torch/nn.h", "torch/optim.h", "torch/data.h", "torch/serialize.h", "torch/jit.h",
                    "torch/nn/module.h"}
_NAMES_FRONTEND = re.compile(r"\b(nn|optim|data|serialize|jit|python)\s*::")
# What those headers declare directly in namespace torch, at or c10 (torch 2.11-2.14). A name
# already visible there through a using-directive would be looked up differently without
# them: `torch::load<float>(p)` finds c10::load with the light header, torch::load without.
FRONTEND_TOP_LEVEL = {"save", "load", "pickle_save", "pickle_load", "ExpandingArray",
                      "ExpandingArrayWithOptionalElem", "IMethod", "OrderedDict", "overloaded",
                      "EnumType", "padding_mode", "padding_mode_string"}
_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>\s*$')
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"^#define ([A-Za-z_]\w*)", re.M)


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
    """The first name in the file that needs the full header (a frontend namespace, or a
    macro in `full_only`), if any."""
    m = _NAMES_FRONTEND.search(main_text)
    if m:
        return m.group(0).replace(" ", "")
    return next((tok for tok in _IDENTIFIER.findall(main_text) if tok in full_only or tok in FRONTEND_TOP_LEVEL),
                None)


def full_only_macros(folder: Path, cxx: str, flags: list[str], light: list[str]) -> set[str] | None:
    """The macros only the full header defines; found the first time (by a detached job that
    concurrent builds share and wait for). None if that failed."""
    done = folder / MACROS_FILE
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists() and not _macros_building(folder) and not _macros_failed(folder):
            _start_macros(folder, cxx, flags, light)
    deadline = time.monotonic() + MACROS_TIMEOUT_S
    while not done.exists() and _macros_building(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    return set(done.read_text().split()) if done.exists() else None


def _macros_building(folder: Path) -> bool:
    return detached.running(folder / "macros-building", MACROS_TIMEOUT_S)


def _start_macros(folder: Path, cxx: str, flags: list[str], light: list[str]) -> None:
    """Preprocess both headers and diff their macro definitions, detached (like the .gch build)."""
    done = folder / MACROS_FILE
    marker = folder / "macros-building"
    marker.write_text(str(time.time()))
    (folder / "full.h").write_text(EXTENSION_INCLUDE + "\n")
    (folder / "light.h").write_text("\n".join(light) + "\n")
    q = {n: shlex.quote(str(folder / n)) for n in ("full.h", "light.h", "full.i", "light.i")}
    pre = shlex.join([cxx, *flags, "-E", "-dD", "-x", "c++"])
    diff = shlex.join([sys.executable, "-m", "kcoder.build.lightheader", str(folder / "full.i"),
                       str(folder / "light.i"), str(done)])
    body = (f"timeout {MACROS_TIMEOUT_S} {pre} {q['full.h']} -o {q['full.i']} &&"
            f" timeout {MACROS_TIMEOUT_S} {pre} {q['light.h']} -o {q['light.i']} && {diff}")
    script = detached.job_script(body, folder / "log", folder / "macros-failed", marker,
                                 (folder / "full.i", folder / "light.i"))
    # The diff step imports this module: make sure it finds the same kcoder.
    detached.spawn(script, child_env())


def _macros_failed(folder: Path) -> bool:
    return (folder / "macros-failed").exists()


def macros_folder(root: Path, cxx: str, identity: str, flags: list[str], light: list[str],
                  torch_id: str) -> Path:
    material = "\n".join([SCAN_VERSION, cxx, identity, *flags, "--", *light, torch_id])
    folder = root / "light" / hashlib.sha256(material.encode()).hexdigest()[:20]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_difference(full_i: str, light_i: str, out: str) -> None:
    """Names of the macros the full preprocessed header defines and the light one does not;
    beside it, every identifier the full header spells (NAMES_FILE: what a failed light build
    checks before building again). Each written whole, then renamed into place; `out` last,
    since it says the scan is done."""
    text = Path(full_i).read_text(errors="replace")
    full, light = set(_DEFINE.findall(text)), _macros(Path(light_i))
    _write_whole(Path(out).with_name(NAMES_FILE), set(_IDENTIFIER.findall(text)))
    _write_whole(Path(out), full - light)


def _write_whole(path: Path, names: set[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(sorted(names)) + "\n")
    tmp.replace(path)


def full_names(folder: Path | None) -> set[str] | None:
    """Every identifier the full header spells, from a finished scan (None without one). A
    name not among them is declared by neither header."""
    if folder is None:
        return None
    try:
        return set((folder / NAMES_FILE).read_text().split())
    except OSError:
        return None


def _macros(preprocessed: Path) -> set[str]:
    """Macro names of a `-E -dD` output (its `#define NAME` lines)."""
    return set(_DEFINE.findall(preprocessed.read_text(errors="replace")))


if __name__ == "__main__":
    write_difference(*sys.argv[1:4])
