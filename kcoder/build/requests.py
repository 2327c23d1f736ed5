"""Build requests: how a candidate's process gets a shared build it cannot have forged.

Everything in kcoder's shared build cache (`build/`, `objects/`, `pch/`, `light/`) is reused by
later evaluations of other candidates, so only a process that never ran a candidate's code may
write it. A candidate's process (evaluate/candidate/worker.py, inside the sandbox, where that cache is
read-only) therefore asks: its `load_inline` call becomes a request file in its box
($KCODER_BUILD_REQUESTS); kcoder's build service (evaluate/buildservice.py) checks it
(`check_params`), builds it in a fresh confined builder process (build/builder.py) that loads
no candidate code, and answers in a folder the candidate can read but not write
($KCODER_BUILD_REPLIES). The candidate then imports the finished extension read-only.

A request the builder will not run as given (a compiler flag outside the allow-list below,
extra include paths, torch's own precompiled header) is refused, and the candidate builds it
itself into its private build folder ($KCODER_BUILD_ROOT: kept for the same candidate file,
never read by another), with torch's plain build steps.

The allow-list keeps out what would make the compiler run or read something the build's key
does not cover: `-wrapper`, `-fplugin`, `-B`, `-specs`, `@file`, profile data, `-Xlinker`
plugins, include and library paths (headers and libraries outside the key).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

from kcoder.paths import cache_root

REQUESTS_ENV = "KCODER_BUILD_REQUESTS"
REPLIES_ENV = "KCODER_BUILD_REPLIES"
PRIVATE_ROOT_ENV = "KCODER_BUILD_ROOT"
MAX_REQUEST_BYTES = 4 * 2**20
POLL_S = 0.1

_IDENT = re.compile(r"^[A-Za-z_]\w{0,99}$")
_DEFINE = r"-[DU][A-Za-z_]\w*(=[\w.+-]*)?"
_F_DENIED = ("plugin", "profile", "auto-profile", "dump", "record", "debug-prefix", "file-prefix", "macro-prefix",
             "stack-usage", "callgraph", "opt-record", "save", "lto", "use-ld", "ld-path", "coverage",
             "test-coverage", "sanitize-coverage", "spec", "diagnostics-", "remap", "working-directory", "module",
             "deps", "self-test", "ltrans", "wpa", "resolution", "opt-info", "compare-debug", "linker")
CFLAG = re.compile(r"^(-O[0-3sgz]?|-Ofast|-g[0-3]?|-w|-pthread|-fopenmp|-std=[\w+]+|" + _DEFINE +
                   r"|-f[a-z0-9][a-z0-9-]*(=[\w.,+-]+)?|-m[a-z0-9][\w.,=+-]*|-W(?![lpa],)[A-Za-z0-9][\w=+-]*)$")
_ARCH = r"(sm|compute)_\d+[af]?"
NVCC_FLAG = re.compile(r"^(-?-use_fast_math|-O[0-3]|-?-lineinfo|-g|-G|--expt-relaxed-constexpr|"
                       r"--expt-extended-lambda|--extended-lambda|--?std=c\+\+\d\d|-res-usage|--resource-usage|"
                       rf"-arch=?{_ARCH}|--gpu-architecture=?{_ARCH}|"
                       rf"-?-gencode=?arch=compute_\d+[af]?,code=\[?{_ARCH}(,{_ARCH})*\]?|"
                       r"-?-maxrregcount=?\d+|--threads=?\d+|-?-diag-suppress=?[\d,]+|--default-stream=?per-thread|"
                       r"--ptxas-options=[\w=,.-]+|-Xptxas=[\w=,.-]+|" + _DEFINE + ")$")
PTXAS_ARG = re.compile(r"^[\w=,.-]+$")
LDFLAG = re.compile(r"^(-l[\w+.-]+|-fopenmp|-pthread|-L/(usr|opt)(/[\w.+-]+)*)$")
_BOOLS = ("is_python_module", "with_pytorch_error_handling", "keep_intermediates", "no_implicit_headers")
_IGNORED = ("build_directory", "verbose")
ARCH_LIST = re.compile(r"^[\w.;+ ]{0,80}$")


class Refused(ValueError):
    """The request cannot be built by the trusted builder as given (the reason says why)."""


def cflag_ok(flag: str) -> bool:
    """A host compiler flag on the list: no -f option that loads, reads or writes files."""
    if not CFLAG.match(flag) or ".." in flag:
        return False
    if flag.startswith("-f"):
        option = flag[2:].removeprefix("no-")
        return not option.startswith(_F_DENIED)
    return True


def _sources(value: Any, name: str) -> list[str] | str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        return list(value)
    raise Refused(f"{name}: expected a string or a list of strings")


def _flags(value: Any, name: str, nvcc: bool = False) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(f, str) for f in value):
        raise Refused(f"{name}: expected a list of strings")
    follows = ""  # nvcc's -Xcompiler / -Xptxas take the next argument
    for flag in value:
        if follows:
            parts, rule = flag.split(","), CFLAG if follows == "-Xcompiler" else PTXAS_ARG
            if not all(cflag_ok(p) if rule is CFLAG else rule.match(p) for p in parts):
                raise Refused(f"{name}: {follows} {flag!r} is not on kcoder's list of build flags")
            follows = ""
        elif nvcc and flag in ("-Xcompiler", "-Xptxas", "--compiler-options", "--ptxas-options"):
            follows = "-Xcompiler" if flag in ("-Xcompiler", "--compiler-options") else "-Xptxas"
        elif nvcc and flag.startswith(("-Xcompiler=", "--compiler-options=")):
            if not all(cflag_ok(p) for p in flag.split("=", 1)[1].split(",")):
                raise Refused(f"{name}: {flag!r} is not on kcoder's list of build flags")
        elif not _plain_flag_ok(flag, name, nvcc):
            raise Refused(f"{name}: {flag!r} is not on kcoder's list of build flags")
    if follows:
        raise Refused(f"{name}: {follows} without an argument")
    return list(value)


def _plain_flag_ok(flag: str, name: str, nvcc: bool) -> bool:
    if nvcc:
        return bool(NVCC_FLAG.match(flag))
    if name == "extra_ldflags":
        return bool(LDFLAG.match(flag)) and ".." not in flag
    return cflag_ok(flag)


def check_params(params: dict[str, Any]) -> dict[str, Any]:
    """The load_inline arguments a trusted builder may build as given, or Refused."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key in _IGNORED:
            continue
        if key == "name":
            if not isinstance(value, str) or not _IDENT.match(value):
                raise Refused("name: expected an identifier")
        elif key in ("cpp_sources", "cuda_sources"):
            value = _sources(value, key)
        elif key == "functions":
            value = _functions(value)
        elif key in ("extra_cflags", "extra_ldflags"):
            value = _flags(value, key)
        elif key == "extra_cuda_cflags":
            value = _flags(value, key, nvcc=True)
        elif key == "with_cuda":
            if value not in (None, True, False):
                raise Refused("with_cuda: expected None or a bool")
        elif key in _BOOLS:
            if not isinstance(value, bool):
                raise Refused(f"{key}: expected a bool")
        elif value not in (None, False, [], ""):  # include paths, torch's own pch, sycl, newer options
            raise Refused(f"{key}={str(value)[:60]!r} is built by the candidate's own process only")
        out[key] = value
    if not isinstance(out.get("cpp_sources"), (str, list)):
        raise Refused("cpp_sources: missing")
    return out


def _functions(value: Any) -> Any:
    names = [value] if isinstance(value, str) else value
    if value is None:
        return None
    if isinstance(names, dict) and all(isinstance(v, str) for v in names.values()):
        names_only = list(names)
    elif isinstance(names, (list, tuple)):
        names_only = list(names)
    else:
        raise Refused("functions: expected a name, a list of names or a dict of docstrings")
    if not all(isinstance(n, str) and _IDENT.match(n) for n in names_only):
        raise Refused("functions: every name must be an identifier")
    return value if isinstance(value, (str, dict)) else list(value)


def private_build_root(candidate: Path) -> Path:
    """The folder a candidate file's own builds go to (those the service refused): keyed by
    the file's bytes, so an unchanged candidate finds them again and no other file reads them.
    Inside `build/` (the profiler's compiler report reads build folders there), under a name
    no shared build folder can have."""
    digest = hashlib.sha256(candidate.read_bytes()).hexdigest()[:20]
    return cache_root() / "build" / f"+own-{digest}"


# --- the candidate's side --------------------------------------------------------------------
def service_folders() -> tuple[Path, Path] | None:
    """(requests, replies) when this process was started with a build service, else None."""
    requests, replies = os.environ.get(REQUESTS_ENV), os.environ.get(REPLIES_ENV)
    return (Path(requests), Path(replies)) if requests and replies else None


def ask(params: dict[str, Any], fast: bool, timeout_s: float = 3600.0) -> dict[str, Any]:
    """Send one build request and wait for its reply (the judge's compile limit ends a build
    that takes too long, by ending this process)."""
    folders = service_folders()
    assert folders is not None
    requests, replies = folders
    name = f"{int(time.time() * 1000)}-{secrets.token_hex(6)}"
    body = {"params": params, "fast": fast, "arch": os.environ.get("TORCH_CUDA_ARCH_LIST", "")}
    tmp = requests / f".{name}.tmp"
    tmp.write_text(json.dumps(body, default=repr))
    tmp.replace(requests / f"{name}.json")
    deadline = time.monotonic() + timeout_s
    reply = replies / f"{name}.json"
    while time.monotonic() < deadline:
        if reply.exists():
            return json.loads(reply.read_text())
        time.sleep(POLL_S)
    return {"refused": "no answer from kcoder's build service"}
