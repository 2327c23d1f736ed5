"""Building candidate extensions: a content-keyed build directory per source.

The worker installs `kcoder_load_inline` in place of torch's `load_inline` before the
candidate is imported. The candidate's call is unchanged in meaning; kcoder only picks the
build directory (a hash of sources + flags + torch version + arch + toolkit), so distinct
candidates never race or reuse a stale failed build, and an unchanged candidate never
rebuilds. Compiler failures become a `BuildError` whose message is the first compiler
diagnostic, located in the candidate's source strings (`cpp_sources:6:16: error: ...`), and
whose log keeps the useful lines. Who may write the shared directories: see requests.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kcoder.build import diagnostics, requests
from kcoder.paths import cache_root


class BuildError(Exception):
    """The candidate's extension did not compile or link. `log` holds the trimmed output."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


# What the worker reports about each load_inline call the candidate made.
BUILD_RECORDS: list[dict[str, Any]] = []
# Builds of kcoder's build service that said a background job of theirs goes on (a .gch).
REMOTE_BACKGROUND: list[str] = []


def find_cuda_home() -> tuple[str | None, str]:
    """Locate the CUDA toolkit the way a user expects; return (path, note).

    Pitfalls handled: CUDA_HOME set to a folder without bin/nvcc (a runtime-only install or a
    typo), and `nvcc` on PATH from a distribution package while a full toolkit lies in
    /usr/local/cuda. An explicit, valid CUDA_HOME/CUDA_PATH always wins.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value:
            if (Path(value) / "bin" / "nvcc").exists():
                return value, f"{var}={value}"
            return None, f"{var}={value} has no bin/nvcc; point it at a CUDA toolkit"
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda", "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = str(Path(nvcc).resolve().parent.parent)
        return home, f"nvcc on PATH ({nvcc})"
    return None, "no CUDA toolkit found (set CUDA_HOME to a folder containing bin/nvcc)"


def prepare_environment(device: str) -> list[str]:
    """Set CUDA_HOME and the target arch before torch.utils.cpp_extension is imported.

    Returns notes for the verdict. Must run before `import torch.utils.cpp_extension`,
    which reads CUDA_HOME once at import.
    """
    notes: list[str] = []
    os.environ.setdefault("MAX_JOBS", str(max(1, os.cpu_count() or 1)))
    if device != "cuda":
        return notes
    home, note = find_cuda_home()
    if home:
        os.environ["CUDA_HOME"] = home
    notes.append(f"CUDA toolkit: {note}")
    return notes


def set_arch_for_device() -> None:
    """Compile for the device's own arch (sm_90 on H200) unless the user chose one."""
    import torch

    if "TORCH_CUDA_ARCH_LIST" in os.environ or not torch.cuda.is_available():
        return
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"


def _build_key(bound: dict[str, Any]) -> str:
    import torch

    material = {
        "args": {k: v for k, v in bound.items() if k not in ("verbose", "build_directory")},
        "torch": torch.__version__,
        "arch": os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
        "cuda_home": os.environ.get("CUDA_HOME", ""),
        "python": sys.version_info[:2],
    }
    blob = json.dumps(material, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


@contextmanager
def _exclusive(build_dir: Path) -> Iterator[None]:
    """Hold an flock on the build dir. The kernel drops it if the holder dies, so a build
    killed at its time limit never leaves the directory locked (unlike torch's lock file,
    which is removed here while we hold the flock, since no live builder can own it)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".kcoder.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        stale = build_dir / "lock"
        if stale.exists():
            stale.unlink()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


BUILT_MARKER = "kcoder-built.json"


def make_load_inline(original: Any, fast: bool = True) -> Any:
    """Wrap torch's load_inline so each distinct build gets its own directory.

    fast: let `fastbuild` try a precompiled header, the light header and a torch-free CUDA unit
    first (built again the plain way when an error may come from the header a form left out).
    A failure raises BuildError: its message is the first compiler diagnostic, located in the
    candidate's sources, and its log ends with how many compiles the build took. A finished
    build leaves a marker, so re-evaluating an unchanged candidate imports the built module
    without running torch's build steps at all.

    Inside a candidate's sandbox ($KCODER_BUILD_ROOT set) the shared build cache is read-only:
    a finished shared build is imported from it, a new one is asked of kcoder's build service
    (requests.py), and one the service refuses is built in the candidate's private folder.
    """
    signature = inspect.signature(original)

    def kcoder_load_inline(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        params = dict(bound.arguments)
        key = _build_key({**params, "kcoder_fast_build": fast})
        base = re.sub(r"\W", "_", str(params["name"]))[:40] or "ext"
        folder = f"{base}-{key[:16]}"
        private = os.environ.get(requests.PRIVATE_ROOT_ENV)
        if not private:  # kcoder's own (trusted) process: the shared cache directly
            return _build_here(original, params, fast, cache_root() / "build" / folder, base)
        shared = cache_root() / "build" / folder
        if _finished(shared, params["name"]):
            return _import_shared(params, shared, base, json.loads((shared / BUILT_MARKER).read_text()))
        if requests.service_folders() is not None:
            reply = _ask_service(params, fast)
            if "refused" not in reply:
                return _take_reply(params, base, reply)
            note = f"built by the candidate's own process ({str(reply['refused'])[:200]})"
        else:
            note = "built by the candidate's own process (no build service here)"
        # Not shared with anyone: the candidate's private folder, torch's plain build steps.
        return _build_here(original, params, False, Path(private) / folder, base, note)

    kcoder_load_inline.__wrapped__ = original  # type: ignore[attr-defined]
    return kcoder_load_inline


def _finished(build_dir: Path, name: str) -> bool:
    """A build that completed here: its marker and the module it made."""
    return (build_dir / BUILT_MARKER).exists() and any(build_dir.glob(f"{name}.*"))


def _build_here(original: Any, params: dict[str, Any], fast: bool, build_dir: Path, base: str,
                note: str | None = None) -> Any:
    """Build (or import the finished build) in `build_dir`, which this process may write."""
    import torch.utils.cpp_extension as cpp_extension

    from kcoder.build import fastbuild

    # The module keeps the candidate's own name (as plain load_inline builds it), so an
    # unchanged binding unit compiles to the same object every turn and can be reused.
    params = {**params, "build_directory": str(build_dir), "verbose": False}
    # Before the build: load_inline inserts its own lines into the caller's source lists.
    sources = diagnostics.SourceMap.from_params(params)
    record: dict[str, Any] = {"name": base, "dir": str(build_dir), "mode": "plain", "notes": [note] if note else [],
                              "cuda": bool(params.get("cuda_sources")), "ok": False}
    started = time.perf_counter()
    with _exclusive(build_dir):
        marker = build_dir / BUILT_MARKER
        record["cached"] = _finished(build_dir, params["name"])
        try:
            if record["cached"]:
                record.update(json.loads(marker.read_text()), cached=True)
                module = cpp_extension._import_module_from_library(
                    params["name"], str(build_dir), params.get("is_python_module", True))
            else:
                module = _build(original, params, fast, record, cpp_extension, fastbuild, sources)
                marker.write_text(json.dumps({"mode": record["mode"], "notes": record["notes"]}))
            record["ok"] = True
        except Exception as exc:  # torch raises RuntimeError; keep any kind as a build failure
            log = diagnostics.trim_compiler_output(str(exc), build_dir, sources=sources)
            reason = diagnostics.first_diagnostic(str(exc), build_dir, sources)
            raise BuildError(reason, f"{log}\n{describe_failure(record)}") from None
        finally:
            record["seconds"] = round(time.perf_counter() - started, 2)
            BUILD_RECORDS.append(record)
    return module


def _import_shared(params: dict[str, Any], build_dir: Path, base: str, built: Any,
                   record: dict[str, Any] | None = None) -> Any:
    """Import a finished build of kcoder's build service (a folder this process cannot write)."""
    import torch.utils.cpp_extension as cpp_extension

    started = time.perf_counter()
    record = record or {"mode": built.get("mode", "plain") if isinstance(built, dict) else "plain",
                        "notes": list(built.get("notes", [])) if isinstance(built, dict) else [], "cached": True}
    record.update(name=base, dir=str(build_dir), cuda=bool(params.get("cuda_sources")), ok=False)
    try:
        module = cpp_extension._import_module_from_library(params["name"], str(build_dir),
                                                           params.get("is_python_module", True))
        record["ok"] = True
        return module
    finally:
        record["seconds"] = round(record.get("seconds", 0.0) + time.perf_counter() - started, 2)
        BUILD_RECORDS.append(record)


def _ask_service(params: dict[str, Any], fast: bool) -> dict[str, Any]:
    try:
        requests.check_params(params)
    except requests.Refused as exc:
        return {"refused": str(exc)}
    reply = requests.ask(params, fast)
    return reply if isinstance(reply, dict) else {"refused": "an unreadable answer from the build service"}


def _take_reply(params: dict[str, Any], base: str, reply: dict[str, Any]) -> Any:
    """The build service's answer: a finished build to import, or the build's failure."""
    record = reply.get("record") if isinstance(reply.get("record"), dict) else {}
    if reply.get("error") is not None:
        BUILD_RECORDS.append({**record, "name": base, "ok": False})
        raise BuildError(str(reply["error"]), str(reply.get("log", "")))
    if reply.get("background"):
        REMOTE_BACKGROUND.append(base)
    build_dir = Path(str(reply.get("dir", "")))
    if not build_dir.is_relative_to(cache_root() / "build"):
        raise BuildError("kcoder's build service named no build folder", str(reply)[:2000])
    return _import_shared(params, build_dir, base, None, dict(record))


def _build(original: Any, params: dict[str, Any], fast: bool, record: dict[str, Any],
           cpp_extension: Any, fastbuild: Any, sources: diagnostics.SourceMap) -> Any:
    """Run torch's load_inline, with the faster ninja step in place of torch's when asked."""
    plain_runner = getattr(cpp_extension, "_run_ninja_build", None)
    if not fast or plain_runner is None:  # a torch without this private step builds the plain way
        record["compiles"] = 1
        return original(**params)
    cpp_extension._run_ninja_build = fastbuild.fast_ninja_runner(plain_runner, record, sources)
    try:
        return original(**params)
    finally:
        cpp_extension._run_ninja_build = plain_runner


def describe(record: dict[str, Any]) -> str:
    """One line for the verdict: how an extension was built and how long it took."""
    state = "cached" if record.get("cached") else "built"
    how = f"{record.get('mode', 'plain')} build" + (f": {', '.join(record['notes'])}" if record.get("notes") else "")
    return f"extension {record['name']}: {state} in {record['seconds']} s ({how})"


def describe_failure(record: dict[str, Any]) -> str:
    """The last line of a failed build's log: how many compiles it took and in which forms
    (a retry with the full torch header happens only for errors a lighter header can cause)."""
    runs = record.get("compiles", 0)
    notes = f" ({'; '.join(record['notes'])})" if record.get("notes") else ""
    return f"kcoder build: {runs} compile run{'s' if runs != 1 else ''}, {record.get('mode', 'plain')} build{notes}"


def install_build_wrapper(fast: bool = True) -> None:
    """Make `torch.utils.cpp_extension.load_inline` the kcoder wrapper for this process."""
    import torch.utils.cpp_extension as cpp_extension

    if getattr(cpp_extension.load_inline, "__wrapped__", None) is None:
        cpp_extension.load_inline = make_load_inline(cpp_extension.load_inline, fast)
