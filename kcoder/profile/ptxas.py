"""Compiler resource report: registers, shared memory, stack frame and spills per kernel.

Available without ncu and without a GPU. The candidate's extension build directory (kcoder's
content-keyed one) holds `build.ninja` with the exact nvcc flags torch used and `cuda.cu`
with the candidate's CUDA source; recompiling that one file in a scratch directory with
`-Xptxas -v` gives ptxas's own per-kernel report (in the sandbox: build.ninja is the
candidate process's writing). The result is cached by the hash of source
and flags (a rebuild of a torch extension costs tens of seconds). When the recompile fails,
`cuobjdump --dump-resource-usage` on the built .so is the fallback (no spill counts there,
but local memory per thread shows spills and stack arrays together).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kcoder.build.inline import find_cuda_home
from kcoder.paths import cache_root
from kcoder.procs import RunResult, run
from kcoder.trust import read_plain, replace_file


@dataclass
class KernelResources:
    """One kernel's compile-time resources, as ptxas (or cuobjdump) reports them."""

    name: str  # as the compiler names it (mangled for C++ kernels)
    arch: str = ""
    registers: int | None = None
    barriers: int | None = None
    smem_bytes: int | None = None  # static shared memory per block
    stack_frame_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    cmem0_bytes: int | None = None
    local_bytes: int | None = None  # cuobjdump only: local memory per thread
    demangled: str | None = None
    source: str = "ptxas"

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    @property
    def display_name(self) -> str:
        return self.demangled or self.name


@dataclass
class CompilerReport:
    """Resource usage of every kernel in the candidate's extensions, or why there is none."""

    kernels: list[KernelResources] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    cached: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"kernels": [asdict(k) | {"spills": k.spills} for k in self.kernels], "notes": self.notes,
                "error": self.error, "cached": self.cached, "seconds": self.seconds}


# --- parsing -----------------------------------------------------------------------------------
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPS = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_FIELDS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
    "cmem0_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def parse_ptxas(text: str) -> list[KernelResources]:
    """Entries of `ptxas -v` output (CUDA 11-13 wording), one per (kernel, arch)."""
    kernels: list[KernelResources] = []
    current: KernelResources | None = None
    props_for: str | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = KernelResources(name=m.group("name"), arch=m.group("arch"))
            kernels.append(current)
            props_for = None
            continue
        if m := _PROPS.search(line):
            props_for = m.group("name")
            continue
        if (m := _FRAME.search(line)) and current is not None and props_for == current.name:
            current.stack_frame_bytes, current.spill_store_bytes, current.spill_load_bytes = map(int, m.groups())
            continue
        if "Used " in line and current is not None:
            for attr, pattern in _FIELDS.items():
                if fm := pattern.search(line):
                    setattr(current, attr, int(fm.group(1)))
            if current.smem_bytes is None:
                current.smem_bytes = 0  # ptxas omits "bytes smem" when a kernel uses none
    return kernels


_CUOBJ_ARCH = re.compile(r"^\s*arch = (sm_\w+)")
_CUOBJ_FN = re.compile(r"^\s*Function (?P<name>[^:\s]+):")
_CUOBJ_VALS = re.compile(r"(REG|STACK|SHARED|LOCAL|CONSTANT\[0\]):(\d+)")


def parse_cuobjdump(text: str) -> list[KernelResources]:
    """Entries of `cuobjdump --dump-resource-usage` output."""
    kernels: list[KernelResources] = []
    arch, pending = "", None
    for line in text.splitlines():
        if m := _CUOBJ_ARCH.match(line):
            arch = m.group(1)
        elif m := _CUOBJ_FN.match(line):
            pending = KernelResources(name=m.group("name"), arch=arch, source="cuobjdump")
            kernels.append(pending)
            line = line[m.end():]
        if pending is not None and (vals := dict(_CUOBJ_VALS.findall(line))):
            pending.registers = int(vals["REG"]) if "REG" in vals else pending.registers
            pending.stack_frame_bytes = int(vals["STACK"]) if "STACK" in vals else pending.stack_frame_bytes
            pending.smem_bytes = int(vals["SHARED"]) if "SHARED" in vals else pending.smem_bytes
            pending.local_bytes = int(vals["LOCAL"]) if "LOCAL" in vals else pending.local_bytes
            pending.cmem0_bytes = int(vals["CONSTANT[0]"]) if "CONSTANT[0]" in vals else pending.cmem0_bytes
    return kernels


def pick_arch(kernels: list[KernelResources], arch: str | None = None) -> list[KernelResources]:
    """Entries for one arch: the device's when given and present, else the highest compiled."""
    archs = sorted({k.arch for k in kernels}, key=lambda a: int(re.sub(r"\D", "", a) or 0))
    if not archs:
        return kernels
    chosen = arch if arch in archs else archs[-1]
    return [k for k in kernels if k.arch == chosen]


def demangle(kernels: list[KernelResources]) -> None:
    """Fill `demangled` with c++filt when it is installed (it is optional)."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    names = [k.name for k in kernels if k.name.startswith("_Z")]
    if not tool or not names:
        return
    result = run([tool], 20, Path.cwd(), tail_bytes=None, stdin_text="\n".join(names))
    if result.rc != 0:
        return
    mapping = dict(zip(names, result.output.splitlines(), strict=False))
    for k in kernels:
        if mapping.get(k.name) and mapping[k.name] != k.name:
            k.demangled = mapping[k.name]


def function_base(name: str) -> str:
    """A kernel's bare function name, for matching ncu rows to compiler entries when one side
    is mangled and the other not: '_Z21sqdiff_partial_kernelILb1EEvPKfS1_lPf' and
    'void sqdiff_partial_kernel<true>(const float *, ...)' both give 'sqdiff_partial_kernel'."""
    if name.startswith("_Z"):
        nested = name.startswith("_ZN")
        pos = 3 if nested else 2
        while pos < len(name) and name[pos] in "KVr":  # cv-qualifiers of a nested name
            pos += 1
        parts: list[str] = []
        while pos < len(name) and name[pos].isdigit():
            digits = re.match(r"\d+", name[pos:])
            assert digits is not None
            length, pos = int(digits.group(0)), pos + len(digits.group(0))
            parts.append(name[pos : pos + length])
            pos += length
            if not nested:
                break
        return parts[-1] if parts else name
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            cut = i
            break
    head, depth, start = name[:cut].strip(), 0, 0
    for i, ch in enumerate(head):  # drop the return type: the last space outside templates
        depth += (ch == "<") - (ch == ">")
        if ch == " " and depth == 0:
            start = i + 1
    return head[start:].split("<", 1)[0].rsplit("::", 1)[-1]


# --- the recompile -----------------------------------------------------------------------------
def _ninja_vars(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_][\w.]*)\s*=\s?(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).replace("$ ", " ").replace("$:", ":").replace("$$", "$")
    return out


def nvcc_command(build_dir: Path, out_obj: Path) -> list[str] | None:
    """The nvcc command torch ran for the build's CUDA file, retargeted to `out_obj`, with
    `-Xptxas -v`; None when the build has no CUDA compile step."""
    ninja = build_dir / "build.ninja"
    if not ninja.exists():
        return None
    text = ninja.read_text(errors="replace")
    # A step whose object kcoder took from its cache is kept as a comment (fastbuild.py).
    m = re.search(r"^(?:# kcoder reused: )?build \S+: cuda_compile (\S+)", text, re.M)
    if not m:
        return None
    env = _ninja_vars(text)
    home, _ = find_cuda_home()
    nvcc = env.get("nvcc") or (str(Path(home) / "bin" / "nvcc") if home else "nvcc")
    src = m.group(1).replace("$:", ":")
    return [*shlex.split(nvcc), *shlex.split(env.get("cuda_cflags", "")), "-c", src, "-o", str(out_obj),
            *shlex.split(env.get("cuda_post_cflags", "")), "-Xptxas", "-v"]


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if re.search(r"error|fatal", line, re.I):
            return line.strip()[:300]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _run_confined(cmd: list[str], timeout_s: float, tmp: Path, build_dir: Path, sandbox: str) -> RunResult:
    """The recompile runs a command line read from build.ninja, a file in the build cache that a
    candidate's process may write (nvcc's path, -ccbin): so it runs in the sandbox `sandbox`
    names (scrubbed environment; bwrap for "bwrap", and for "auto" where it works), never with
    kcoder's own environment. "bwrap" that cannot run here: ValueError, nothing runs."""
    from kcoder.evaluate.sandbox import Box, confined_command, kill_all, resolve_mode

    mode = resolve_mode(sandbox)[0]
    box = Box.create(tmp)
    argv, env = confined_command(cmd, box, "cpu", mode, [build_dir], writable=[tmp])
    try:
        return run(argv, timeout_s, tmp, env, tail_bytes=None)
    finally:
        kill_all(box.marker)


def compile_report(build_dir: Path, timeout_s: float = 300.0, arch: str | None = None,
                   sandbox: str = "auto") -> CompilerReport:
    """ptxas -v resources for the CUDA kernels of one extension build directory; the recompile
    runs confined as `sandbox` says (`_run_confined`)."""
    import time

    started = time.monotonic()
    report = CompilerReport()
    with tempfile.TemporaryDirectory(prefix="kcoder-ptxas-") as tmp:
        cmd = nvcc_command(build_dir, Path(tmp) / "cuda.o")
        if cmd is None:
            report.error = f"{build_dir}: no CUDA compile step in build.ninja (no cuda_sources?)"
            return report
        src = Path(cmd[cmd.index("-c") + 1])
        material = json.dumps([c for c in cmd if not c.startswith(tmp)]) + (src.read_text(errors="replace")
                                                                           if src.exists() else "")
        key = hashlib.sha256(material.encode()).hexdigest()[:20]
        cache = cache_root() / "profile" / f"ptxas-{key}.json"
        if cache.exists():
            try:
                data = json.loads(read_plain(cache))  # a link planted in its place is refused
                report.kernels = pick_arch([KernelResources(**k) for k in data["kernels"]], arch)
                report.cached = True
                return report
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a damaged cache entry (or a link planted in its place) is rebuilt
        res = _run_confined(cmd, timeout_s, Path(tmp), build_dir, sandbox)
        rc, out = res.rc, res.output
    report.seconds = round(time.monotonic() - started, 1)
    if rc is None:
        report.error = f"ptxas report: the recompile exceeded {timeout_s:.0f} s and was killed"
    elif rc != 0:
        report.error = f"ptxas report: the recompile failed: {_first_error(out)}"
    else:
        kernels = parse_ptxas(out)
        demangle(kernels)
        try:
            # The cache's folder is one other processes (a candidate's, under `--sandbox none`)
            # could write: written whole through a private temporary file, no link followed.
            cache.parent.mkdir(parents=True, exist_ok=True)
            replace_file(cache, json.dumps({"kernels": [asdict(k) for k in kernels]}).encode(), mode=0o600)
        except OSError as exc:  # a link where the cache's folder should be: no cache, the report stands
            report.notes.append(f"ptxas report not cached ({cache.parent}: {exc.strerror or exc})")
        report.kernels = pick_arch(kernels, arch)
    if report.error:
        _cuobjdump_fallback(build_dir, report, arch)
    return report


def _cuobjdump_fallback(build_dir: Path, report: CompilerReport, arch: str | None) -> None:
    home, _ = find_cuda_home()
    tool = shutil.which("cuobjdump") or (str(Path(home) / "bin" / "cuobjdump") if home else None)
    libs = sorted(build_dir.glob("*.so"))
    if not tool or not Path(tool).exists() or not libs:
        return
    res = run([tool, "--dump-resource-usage", str(libs[0])], 60.0, build_dir, tail_bytes=None)
    rc, out = res.rc, res.output
    kernels = parse_cuobjdump(out) if rc == 0 else []
    if kernels:
        demangle(kernels)
        report.kernels = pick_arch(kernels, arch)
        report.notes.append(f"{report.error}; resources from cuobjdump instead (no spill counts; "
                            "LOCAL = local memory per thread: spills + stack arrays)")
        report.error = None


def compiler_reports(build_dirs: list[Path], timeout_s: float = 300.0, arch: str | None = None,
                     sandbox: str = "auto") -> CompilerReport:
    """One report over several extension builds (a candidate may call load_inline more than once)."""
    total = CompilerReport(cached=True)
    errors = []
    for build_dir in build_dirs:
        r = compile_report(build_dir, timeout_s, arch, sandbox)
        total.kernels += r.kernels
        total.notes += r.notes
        total.cached = total.cached and r.cached
        total.seconds += r.seconds
        if r.error:
            errors.append(r.error)
    if not build_dirs:
        total.cached = False
        errors.append("the candidate built no extension (no load_inline call seen)")
    total.error = "; ".join(errors) if errors and not total.kernels else None
    total.notes += errors if total.kernels else []
    return total
