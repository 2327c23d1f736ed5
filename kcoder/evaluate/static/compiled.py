"""The text `load_inline` compiles, rendered from its arguments as torch renders it.

The native rules (native.py) first read each string constant of the candidate's file alone; a
name split across constants and joined at run time (`"cudaStre" + "amCreate"`, `"".join(...)`,
`%`, `.format`, f-strings of run-time values) is whole only in the strings handed to
`load_inline`. kcoder's build service (evaluate/buildservice.py, in the judge's process) reads
those strings from each build request and checks the translation units made of them before
anything is built:

- the C++ unit: `#include <torch/extension.h>` (unless `no_implicit_headers`), `cpp_sources`
  joined by newlines, and the pybind11 module `functions` makes (its names and docstrings are
  text of that unit: a docstring's quote ends the literal);
- the CUDA unit: torch's three includes and `cuda_sources` joined by newlines;
- the `-D` macros of the unit's flags (`extra_cflags`; `extra_cuda_cflags`, `-Xcompiler`
  ones included) as `#define` lines before it, so a name pasted from a flag is read whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kcoder.evaluate.static.native import native_findings


@dataclass(frozen=True)
class Unit:
    """One translation unit's text, and which argument each of its lines came from."""

    text: str
    origins: list[tuple[str, int]]  # per line: (argument, line within it, 1-based; 0: none)

    def where(self, line: int) -> str:
        argument, number = self.origins[min(max(line, 0), len(self.origins) - 1)]
        return f"{argument}:{number}" if number else argument


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def _defines(flags: Any, nvcc: bool) -> Iterator[str]:
    """`#define` lines for the `-D` flags (`-DNAME=VALUE`, `-DNAME`, `-D NAME`, nvcc's
    `--define-macro`, and `-Xcompiler -D...` on nvcc's line)."""
    items = _strings(flags)
    host = False
    for i, flag in enumerate(items):
        parts = [flag]
        if host:
            parts, host = flag.split(","), False
        elif nvcc and flag in ("-Xcompiler", "--compiler-options"):
            host = True
            continue
        elif nvcc and flag.startswith(("-Xcompiler=", "--compiler-options=")):
            parts = flag.split("=", 1)[1].split(",")
        for part in parts:
            part = part.strip()
            if part in ("-D", "--define-macro") and i + 1 < len(items):
                part = "-D" + items[i + 1]
            for prefix in ("-D", "--define-macro=", "-define-macro="):
                if part.startswith(prefix) and len(part) > len(prefix):
                    name, _, value = part[len(prefix):].partition("=")
                    yield f"#define {name} {value if '=' in part[len(prefix):] else '1'}"
                    break


def _binding_lines(functions: Any, error_handling: bool) -> list[str]:
    """The pybind11 module torch's load_inline writes for `functions`."""
    if functions is None:
        return []
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, (list, tuple)):
        functions = {f: f for f in functions if isinstance(f, str)}
    if not isinstance(functions, dict):
        return []
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for name, doc in functions.items():
        target = f"torch::wrap_pybind_function({name})" if error_handling else str(name)
        lines.append(f'm.def("{name}", {target}, "{doc}");')
    return lines + ["}"]


def _unit(defines: list[str], flag_name: str, header: list[str], sources: list[str], source_name: str,
          tail: list[str]) -> Unit:
    origins = [(flag_name, 0)] * len(defines) + [("kcoder's header lines", 0)] * len(header)
    body = "\n".join(sources)
    origins += [(source_name, n + 1) for n in range(body.count("\n") + 1)]
    origins += [("functions", 0)] * len(tail)
    return Unit("\n".join([*defines, *header, body, *tail]), origins)


def units(params: dict[str, Any]) -> list[Unit]:
    """The translation units `load_inline(**params)` compiles (read leniently: a malformed
    argument adds nothing; the request's own checks refuse it)."""
    implicit = not params.get("no_implicit_headers")
    out = []
    cpp = _strings(params.get("cpp_sources"))
    bindings = _binding_lines(params.get("functions"), params.get("with_pytorch_error_handling", True) is not False)
    if cpp or bindings:
        out.append(_unit(list(_defines(params.get("extra_cflags"), nvcc=False)), "extra_cflags",
                         ["#include <torch/extension.h>"] if implicit else [], cpp, "cpp_sources", bindings))
    cuda = _strings(params.get("cuda_sources"))
    if cuda:
        header = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"] if implicit else []
        out.append(_unit(list(_defines(params.get("extra_cuda_cflags"), nvcc=True)), "extra_cuda_cflags",
                         header, cuda, "cuda_sources", []))
    return out


@dataclass(frozen=True)
class BuildFinding:
    check: str
    where: str  # "cuda_sources:12", "extra_cuda_cflags", "functions"
    message: str

    def describe(self) -> str:
        return f"static check [{self.check}]: {self.message} (load_inline {self.where}, the text as compiled)"


def build_findings(params: dict[str, Any], allow: list[str] | None = None) -> list[BuildFinding]:
    """Every native finding in the text `load_inline(**params)` would compile, unit by unit."""
    found: dict[tuple[str, str, str], BuildFinding] = {}
    for unit in units(params):
        for check, line, message in native_findings(unit.text, list(allow or [])):
            finding = BuildFinding(check, unit.where(line), message)
            found.setdefault((finding.check, finding.where, finding.message), finding)
    return list(found.values())
