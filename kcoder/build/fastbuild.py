"""Faster builds of the same extension: a precompiled torch header and torch-free CUDA units.

torch writes its build.ninja exactly as plain `load_inline` would; kcoder then changes how two
compile steps run, never what they compile:

- main.cpp begins with `#include <torch/extension.h>` and then the candidate's own leading
  torch includes. Those same lines, in the same order, are compiled once into a GCC
  precompiled header (cached per compiler, flags, include block and torch) and force-included,
  so the file's own includes hit their include guards: the same translation unit, parsed once.
- cuda.cu begins with `#include <torch/types.h>`, which load_inline adds to every CUDA source.
  When the candidate's CUDA code never names torch, ATen or c10, that line is blanked (line
  numbers unchanged) and nvcc skips the torch headers, which are nearly all of its time.

- A binding that names nothing of torch's C++ frontend (torch::nn, optim, data, ...) is
  compiled with torch/extension.h's other headers only (lightheader.py says when that is
  safe); GCC instantiates every template the included headers use, so this is most of what
  a binding unit costs even with a .gch.
- Each compiled object is kept in a cache keyed by its compiler, flags, torch version and the
  exact text of its source file, so the next turn of an agent, which usually changes only
  the kernels, links the unchanged binding object instead of compiling main.cpp again.

If a unit built with the light header or as a torch-free CUDA unit fails with an error that the
left-out header could cause (an undeclared name, a missing member: diagnostics.py), it runs
again with load_inline's own main.cpp or cuda.cu (a precompiled full header stays: it cannot
change what main.cpp means), so a candidate's verdict is that of plain load_inline; an error of
the source's own (a syntax error) is reported after the one compile, with the same message.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kcoder import procs
from kcoder.build import detached, diagnostics, lightheader
from kcoder.paths import cache_root

PCH_HEADER = "kcoder_pch.h"
FAST_CUDA_SOURCE = "kcoder_fast.cu"
REUSED_PREFIX = "# kcoder reused: "
# The build note each faster form leaves (the fallback reads which forms a build used from them).
_FORM_NOTES = {"light": "light torch header", "torch_free": "torch-free CUDA unit"}
PCH_TIMEOUT_S = 900

_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10|pybind11)/[^>"]+[>"]\s*$')
_IMPLICIT_CUDA_HEADERS = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
# Any of these in the candidate's CUDA code means it may need the torch headers.
_USES_TORCH = re.compile(r"\b(torch|ATen|c10|pybind11|Python\.h|at::|TORCH_\w*|AT_\w*|C10_\w*|PYBIND11_\w*|Tensor)")
_EXTENSION_NAME_FLAG = re.compile(r"^-DTORCH_EXTENSION_NAME=")
_COMPILE_EDGE = re.compile(r"^build (\S+): (compile|cuda_compile) (\S+)\n", re.M)
# The variables each compile rule's command reads.
_RULE_VARIABLES = {"compile": ("cxx", "cflags", "post_cflags"),
                   "cuda_compile": ("nvcc", "cuda_cflags", "cuda_post_cflags")}


def parse_ninja_variables(text: str) -> dict[str, str]:
    """Top-level `name = value` lines of a build.ninja (rule bodies are indented)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+) = ?(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def leading_torch_includes(source: str) -> list[str]:
    """The block of torch/ATen/c10/pybind11 includes the file starts with (blank lines and
    `//` comments allowed between them); stops at the first line of anything else."""
    includes: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if not _TORCH_INCLUDE.match(line):
            break
        includes.append(stripped)
    return includes


def torch_free_cuda(cuda_text: str) -> bool:
    """True when cuda.cu is load_inline's three implicit headers followed by CUDA code that
    never refers to torch (so the first header can go without changing what compiles)."""
    lines = cuda_text.split("\n")
    if lines[:3] != _IMPLICIT_CUDA_HEADERS:
        return False
    return _USES_TORCH.search("\n".join(lines[3:])) is None


def accelerate(ninja_text: str, build_dir: Path, notes: list[str], torch_free: bool = True,
               light: bool = True) -> str:
    """Return the faster build.ninja text (or the same text when nothing applies).

    torch_free: also compile a torch-free cuda.cu without the implicit torch header.
    light: compile a binding that needs none of the C++ frontend with the light torch header."""
    variables = parse_ninja_variables(ninja_text)
    text = ninja_text
    main_cpp = build_dir / "main.cpp"
    if "build main.o: compile" in text and main_cpp.exists() and "cxx" in variables:
        text = _accelerate_binding(text, variables, main_cpp, notes, light)
    cuda = build_dir / "cuda.cu"
    if torch_free and cuda.exists() and torch_free_cuda(cuda.read_text()):
        lines = cuda.read_text().split("\n")
        lines[0] = "// kcoder: the implicit torch header is left out; this CUDA code does not use torch"
        (build_dir / FAST_CUDA_SOURCE).write_text("\n".join(lines))
        fast_text = text.replace(f" {cuda}\n", f" {build_dir / FAST_CUDA_SOURCE}\n")
        if fast_text != text:
            text = fast_text
            notes.append(_FORM_NOTES["torch_free"])
    return text


def _accelerate_binding(text: str, variables: dict[str, str], main_cpp: Path, notes: list[str],
                        light: bool) -> str:
    """main.o with the light header when it applies (see lightheader), else with the full
    header precompiled once it is built."""
    main_text = main_cpp.read_text()
    includes = leading_torch_includes(main_text)
    if not includes:
        return text
    cxx, flags = variables["cxx"], _binding_flags(variables)
    block = _light_block(cxx, flags, includes, main_text, notes) if light else None
    if block is not None:
        header, ready = ensure_pch(cxx, flags, block, notes)
        light_main = main_cpp.with_name(lightheader.LIGHT_MAIN_SOURCE)
        light_main.write_text(lightheader.rewrite_main(main_text, includes))
        text = text.replace(f"build main.o: compile {main_cpp}\n", f"build main.o: compile {light_main}\n")
        notes.append(_FORM_NOTES["light"] + (", precompiled" if ready else ""))
    else:
        header, ready = ensure_pch(cxx, flags, includes, notes)
        if not ready:
            return text
        notes.append("precompiled torch header")
    return re.sub(r"^cflags = (.*)$", lambda m: f"cflags = {m.group(1)} -include {header}", text, count=1, flags=re.M)


def _binding_flags(variables: dict[str, str]) -> list[str]:
    """The binding unit's compile flags, less the extension's name (shared by every extension)."""
    flags = [f for f in variables.get("cflags", "").split() if not _EXTENSION_NAME_FLAG.match(f)]
    return flags + variables.get("post_cflags", "").split()


def _scan_folder(cxx: str, flags: list[str]) -> tuple[Path, list[str]] | None:
    """The light header's scan folder for this compiler and these flags, and the light include
    block; None when this torch's extension.h is not the pair lightheader is written for."""
    light = lightheader.light_includes(_include_dirs(flags))
    if not light:
        return None
    return lightheader.macros_folder(cache_root(), cxx, _compiler_identity(cxx), flags, light,
                                     _torch_identity(flags)), light


def _light_block(cxx: str, flags: list[str], includes: list[str], main_text: str, notes: list[str]) -> list[str] | None:
    """The include block with torch/extension.h's light part in its place, when the binding
    can use it; None means the full header."""
    if os.environ.get("KCODER_LIGHT_HEADER") == "off" or includes[0] != lightheader.EXTENSION_INCLUDE:
        return None
    scan = _scan_folder(cxx, flags)
    if scan is None:
        return None
    folder, light = scan
    # Once per compiler, flags and torch (about 3 s on 2 cores); a build then saves more than that.
    full_only = lightheader.full_only_macros(folder, cxx, flags, light)
    if full_only is None:
        return None
    name = lightheader.blocking_name(main_text, full_only)
    if name is not None:
        notes.append(f"full torch header ({name})")
        return None
    return light + [line for line in includes if line != lightheader.EXTENSION_INCLUDE and line not in light]


def _include_dirs(flags: list[str]) -> list[str]:
    return re.findall(r"(?:^|\s)-(?:isystem|I)\s*(\S+)", " ".join(flags))


def _torch_identity(flags: list[str]) -> str:
    """torch's version and where its headers really are: a header compiled for one torch
    must never be force-included into a build against another."""
    import torch

    return "\n".join([torch.__version__, *(os.path.realpath(d) for d in _include_dirs(flags))])


def ensure_pch(cxx: str, flags: list[str], includes: list[str], notes: list[str]) -> tuple[Path, bool]:
    """The force-include header of `includes` and whether its .gch (compiled with `flags`) is built.

    GCC uses a .gch only when the flags match the ones it was built with, so the key is the
    whole flag list (include paths, -O level, -fPIC, -std, ...) plus the compiler's identity
    and torch's. A missing .gch is built by a detached compiler while this build goes on
    without it (building one costs more than the compile it saves, so the first build with new
    flags is never slower than plain); KCODER_PCH=wait waits for it instead, KCODER_PCH=off
    never builds one. The header text itself is always written: it can be included as it is.
    """
    policy = os.environ.get("KCODER_PCH", "background")
    material = "\n".join([cxx, _compiler_identity(cxx), *flags, "--", *includes, _torch_identity(flags)])
    folder = cache_root() / "pch" / hashlib.sha256(material.encode()).hexdigest()[:20]
    header, gch = folder / PCH_HEADER, folder / (PCH_HEADER + ".gch")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not header.exists():
            header.write_text("\n".join(includes) + "\n")
        missing = not gch.exists() and not (folder / "failed").exists() and not _building(folder)
        if policy != "off" and missing:
            _start_pch_build(folder, [cxx, "-x", "c++-header", *flags, str(header)])
    if policy == "off":
        return header, False
    if policy == "wait":
        deadline = time.monotonic() + PCH_TIMEOUT_S
        while _building(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
    if gch.exists():
        return header, True
    if (folder / "failed").exists():
        last = procs.last_line(folder / "failed")[:200]
        notes.append(f"no precompiled header (building it failed: {last}; see {folder / 'failed'})")
    else:
        notes.append("precompiled torch header being built for the next builds")
    return header, False


def _building(folder: Path) -> bool:
    """A PCH build is in progress: its marker exists and is younger than the time limit."""
    return detached.running(folder / "building", PCH_TIMEOUT_S)


def _start_pch_build(folder: Path, command: list[str]) -> None:
    """Compile the header detached; write to a temporary name and rename, so a .gch is always whole."""
    tmp, gch = folder / (PCH_HEADER + ".gch.tmp"), folder / (PCH_HEADER + ".gch")
    marker = folder / "building"
    marker.write_text(str(time.time()))
    compile_cmd = shlex.join([*command, "-o", str(tmp)])
    body = f"timeout {PCH_TIMEOUT_S} {compile_cmd} && mv {shlex.quote(str(tmp))} {shlex.quote(str(gch))}"
    script = detached.job_script(body, folder / "log", folder / "failed", marker, (tmp,))
    detached.spawn(script)


_IDENTITIES: dict[str, str] = {}


def _compiler_identity(cxx: str) -> str:
    if cxx not in _IDENTITIES:
        version = procs.run([cxx, "--version"], 30, Path.cwd())
        _IDENTITIES[cxx] = version.output.strip() if version.rc == 0 else ""
    return _IDENTITIES[cxx]


def fast_ninja_runner(original: Callable[..., Any], record: dict[str, Any],
                      sources: diagnostics.SourceMap | None = None) -> Callable[..., Any]:
    """A stand-in for torch's `_run_ninja_build` that tries the faster build first.

    A unit that fails in its faster form is built again from load_inline's own source when its
    errors can come from the header that form leaves out (`_forms_to_retry`); a unit that
    compiled stays as it was, so a kernel's compile error does not cost the binding's compile
    twice, and a syntax error costs one compile. `record["compiles"]` counts ninja runs."""

    def run(build_directory: str, verbose: bool, error_prefix: str) -> Any:
        build_dir = Path(build_directory)
        plain = (build_dir / "build.ninja").read_text()
        fallbacks: list[str] = []
        forms = {"light": True, "torch_free": True}
        while True:
            notes: list[str] = []
            text = accelerate(plain, build_dir, notes, **forms)
            if not fallbacks:  # the first attempt says how the build went
                record["mode"] = "fast" if text != plain else "plain"
            record["compiles"] = record.get("compiles", 0) + 1
            try:
                return _build_reusing_objects(original, build_dir, text, notes + fallbacks, record,
                                              verbose, error_prefix)
            except RuntimeError as exc:
                retry = _forms_to_retry(str(exc), notes, build_dir, plain)
                if not retry:
                    raise
                record.setdefault("fast_error", diagnostics.first_diagnostic(str(exc), build_dir, sources))
                for form in retry:
                    forms[form] = False
                    fallbacks.append(_FALLBACK_NOTES[form])

    return run


_FORM_OUTPUT = {"light": "main.o", "torch_free": "cuda.cuda.o"}
_FALLBACK_NOTES = {"light": f"{_FORM_NOTES['light']} failed; built with the full torch header",
                   "torch_free": f"{_FORM_NOTES['torch_free']} failed; built with the torch header"}


def _forms_to_retry(error: str, notes: list[str], build_dir: Path, plain_ninja: str) -> list[str]:
    """The faster forms this failed build used whose unit may have failed only for the header
    the form leaves out. A form whose unit failed with errors of its own source (a syntax
    error; a name the full header never spells) is not retried: plain load_inline would fail
    the same way. Every form used when ninja names no compile unit (a link error)."""
    used = [form for form, note in _FORM_NOTES.items() if any(n.startswith(note) for n in notes)]
    sections = diagnostics.unit_output(error.replace(str(build_dir) + "/", ""))
    if not sections or not set(sections) <= set(_FORM_OUTPUT.values()):
        return used
    retry = []
    for form in used:
        lines = sections.get(_FORM_OUTPUT[form])
        if lines is None:
            continue  # this form's unit compiled
        names = _full_header_names(plain_ninja) if form == "light" else None
        if diagnostics.could_be_missing_header(lines, names):
            retry.append(form)
    return retry


def _full_header_names(ninja_text: str) -> set[str] | None:
    """Every identifier torch/extension.h spells, for this build's compiler and flags (from the
    light header's scan); None when unknown, and then any declaration error is retried."""
    variables = parse_ninja_variables(ninja_text)
    if "cxx" not in variables:
        return None
    scan = _scan_folder(variables["cxx"], _binding_flags(variables))
    return lightheader.full_names(scan[0]) if scan else None


def _build_reusing_objects(original: Callable[..., Any], build_dir: Path, ninja_text: str, notes: list[str],
                           record: dict[str, Any], verbose: bool, error_prefix: str) -> Any:
    """Run torch's ninja step on `ninja_text` with cached objects in place of their compiles."""
    ninja_text, to_store = reuse_objects(ninja_text, build_dir, notes)
    record["notes"] = notes
    (build_dir / "build.ninja").write_text(ninja_text)
    result = original(str(build_dir), verbose, error_prefix)
    store_objects(build_dir, to_store)
    return result


def object_key(ninja_text: str, rule: str, source: Path) -> str | None:
    """Content key of one compile step, or None when its inputs are not all visible here.

    The key covers the compiler and its version, every flag of the rule (so the precompiled
    header, the arch and the extension name are in it), torch's version (its headers) and the
    source text. User include paths (-I) could change a header behind the key: not cached.
    """
    import torch

    variables = parse_ninja_variables(ninja_text)
    compiler, *flag_names = _RULE_VARIABLES[rule]
    flags = " ".join(variables.get(name, "") for name in flag_names)
    if re.search(r"(^|\s)-I", flags) or compiler not in variables or not source.exists():
        return None
    # Resolved include folders: /usr/local/cuda may point at a new toolkit tomorrow.
    folders = [os.path.realpath(f) for f in re.findall(r"-isystem\s+(\S+)", flags)]
    material = "\n".join([variables[compiler], _compiler_identity(variables[compiler]), flags, *folders,
                          torch.__version__, source.read_text()])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def reuse_objects(ninja_text: str, build_dir: Path, notes: list[str]) -> tuple[str, dict[str, Path]]:
    """Take already-compiled objects from the cache; return the ninja text without their compile
    steps and {object: cache path} for the objects this build compiles and should keep."""
    folder = cache_root() / "objects"
    text, to_store, reused = ninja_text, {}, []
    for output, rule, source in _COMPILE_EDGE.findall(ninja_text):
        key = object_key(ninja_text, rule, Path(source))
        if key is None:
            continue
        cached = folder / f"{key}.o"
        if cached.exists():
            shutil.copyfile(cached, build_dir / output)
            # No build step left for it: ninja links the copied object as a source file. The
            # step stays as a comment for tools that recompile it (the profiler's ptxas report).
            edge = f"build {output}: {rule} {source}\n"
            text = text.replace(edge, REUSED_PREFIX + edge, 1)
            reused.append(output)
        else:
            to_store[output] = cached
    if reused:
        notes.append("reused " + ", ".join(reused))
    return text, to_store


def store_objects(build_dir: Path, to_store: dict[str, Path]) -> None:
    """Keep this build's objects for later builds (written whole, then renamed into place)."""
    for output, cached in to_store.items():
        built = build_dir / output
        if built.exists():
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".tmp{os.getpid()}")
            shutil.copyfile(built, tmp)
            tmp.replace(cached)
