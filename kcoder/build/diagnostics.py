"""Compiler output of a failed build, read for the verdict and for the faster build's retry.

torch's error for a failed build is its banner ("Error building extension 'x': ...") followed
by ninja's output: command lines, then each failed unit's compiler messages. The verdict's
reason is the first compiler diagnostic, located in the candidate's own source strings
(`cpp_sources:6:16: error: ...`, `cuda_sources:12: error: ...`); the log keeps the useful lines.

The faster forms (fastbuild) leave out torch headers. A unit that failed in a faster form is
built again with load_inline's own source only when one of its errors is of the kind a missing
declaration can cause (an undeclared name, a missing member, an incomplete type, ...; see
`could_be_missing_header`). A syntax error is reported after one compile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The files load_inline writes, and the faster forms' copies of them (same line numbers).
_UNIT_KIND = {"main.cpp": "cpp", "kcoder_light_main.cpp": "cpp", "cuda.cu": "cuda", "kcoder_fast.cu": "cuda"}
_LOCATION = re.compile(r"(?<![\w./-])(kcoder_light_main\.cpp|main\.cpp|kcoder_fast\.cu|cuda\.cu)"
                       r"(?::(\d+)(?::(\d+))?|\((\d+)\))")
# A compiler, assembler or linker error line (GCC/Clang `error:`, nvcc's EDG `error #20-D:`,
# ptxas `ptxas error   :`, the linker's undefined references). torch's "Error building" is not.
_ERROR = re.compile(r"(?:\berror\b(?: #[\w-]+)?\s*:|\bfatal\b(?: error)?\s*:|undefined reference to|"
                    r"undefined symbol)")
_NOISE = re.compile(r"^\[\d+/\d+\] |^FAILED: |^ninja: |^subprocess\.|^The above exception|^Traceback|"
                    r"^Error building extension")
_SECTION_START = re.compile(r"^FAILED: (?:\[code=\d+\] )?(\S+)")
_SECTION_END = re.compile(r"^\[\d+/\d+\] |^FAILED: |^ninja: |^Error building extension")
MAX_REASON = 300


@dataclass
class SourceMap:
    """Where each line of main.cpp / cuda.cu came from: load_inline joins the candidate's source
    strings with newlines after its implicit includes and appends the generated bindings."""

    cpp: list[int] = field(default_factory=lambda: [10**9])  # line count of each cpp_sources string
    cuda: list[int] = field(default_factory=lambda: [10**9])
    cpp_offset: int = 1  # the lines load_inline puts before them
    cuda_offset: int = 3

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SourceMap:
        def counts(sources: Any) -> list[int]:
            items = [sources] if isinstance(sources, str) else list(sources or [])
            return [str(s).count("\n") + 1 for s in items] or [0]

        implicit = not params.get("no_implicit_headers", False)
        return cls(counts(params.get("cpp_sources")), counts(params.get("cuda_sources")),
                   1 if implicit else 0, 3 if implicit else 0)

    def label(self, kind: str, line: int) -> tuple[str, int | None]:
        """(`cpp_sources` / `cpp_sources[1]` / what else the line is, line within it)."""
        sizes, offset = (self.cpp, self.cpp_offset) if kind == "cpp" else (self.cuda, self.cuda_offset)
        name = "cpp_sources" if kind == "cpp" else "cuda_sources"
        rest = line - offset
        if rest < 1:
            return f"{name} (the #include load_inline adds)", None
        for index, size in enumerate(sizes):
            if rest <= size:
                return (name if len(sizes) == 1 else f"{name}[{index}]"), rest
            rest -= size
        if kind == "cpp":
            return "the binding load_inline generates for `functions`", None
        return name, line - offset


def map_locations(line: str, sources: SourceMap | None = None) -> str:
    """`main.cpp:7:3` -> `cpp_sources:6:3`, `cuda.cu(12)` -> `cuda_sources:9` (the faster
    forms' file names too)."""
    smap = sources or SourceMap()

    def repl(m: re.Match[str]) -> str:
        number = m.group(2) or m.group(4)
        if number is None:
            return f"{'cpp' if _UNIT_KIND[m.group(1)] == 'cpp' else 'cuda'}_sources"
        label, at = smap.label(_UNIT_KIND[m.group(1)], int(number))
        if at is None:
            return label
        return f"{label}:{at}" + (f":{m.group(3)}" if m.group(3) else "")

    return _LOCATION.sub(repl, line)


def _strip_dir(text: str, build_dir: Path | None) -> str:
    return text.replace(str(build_dir) + "/", "") if build_dir else text


def error_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if _ERROR.search(ln) and not _NOISE.search(ln)]


def first_diagnostic(text: str, build_dir: Path | None = None, sources: SourceMap | None = None) -> str:
    """The first compiler error, preferably one in the candidate's own sources, located there
    (`cpp_sources:6:16: error: ...`). Falls back to any error line (a header, the linker), then
    to the first line of the output, each as `compile error: <line>`."""
    text = _strip_dir(text, build_dir)
    errors = error_lines(text)
    own = [ln for ln in errors if _LOCATION.match(ln)]
    linker = [ln for ln in errors if "undefined" in ln]
    if own:
        chosen = own[0]
    elif linker:
        chosen = linker[0]
    elif errors:
        chosen = errors[0]
    else:
        rest = [ln.strip() for ln in text.splitlines() if ln.strip() and not _NOISE.search(ln)]
        chosen = rest[0] if rest else (text.strip().splitlines() or ["the build failed"])[0]
    located = bool(_LOCATION.match(chosen))
    chosen = map_locations(chosen, sources)
    if not located:  # the compiler's command line, a header, the linker, the import of the result
        chosen = f"compile error: {chosen}"
    return chosen if len(chosen) <= MAX_REASON else chosen[: MAX_REASON - 3] + "..."


def trim_compiler_output(text: str, build_dir: Path | None, max_lines: int = 30,
                         sources: SourceMap | None = None) -> str:
    """Keep the compiler's diagnostics (file:line: error ... plus context), drop command lines.
    Line numbers are mapped back to the candidate's own source strings (see SourceMap)."""
    lines = [ln.rstrip() for ln in _strip_dir(text, build_dir).splitlines()]
    keep: list[str] = []
    for i, line in enumerate(lines):
        if not line.strip() or _NOISE.search(line) or len(line) > 400:
            continue
        if re.search(r"error|Error|undefined reference|fatal", line):
            mapped = map_locations(line, sources)
            keep.append(mapped)
            # the source line and caret that compilers print after a diagnostic (GCC numbers
            # the source line as in its file: renumbered as the diagnostic was)
            raw, new = _line_number(line), _line_number(mapped)
            for extra in lines[i + 1 : i + 3]:
                if extra.strip() and not re.search(r"error|warning|note:", extra) and len(extra) < 400:
                    keep.append(re.sub(rf"^(\s*){raw}( \| )", rf"\g<1>{new}\g<2>", extra) if raw and new else extra)
    if not keep:
        keep = [ln for ln in lines if ln.strip() and not _NOISE.search(ln)][-max_lines:]
    deduped = list(dict.fromkeys(keep))
    if len(deduped) > max_lines:
        deduped = deduped[:max_lines] + [f"... ({len(deduped) - max_lines} more lines trimmed)"]
    return "\n".join(deduped)


def _line_number(line: str) -> str | None:
    m = re.match(r"[^:(\s]+(?::|\()(\d+)", line)
    return m.group(1) if m else None


def unit_output(error: str) -> dict[str, list[str]]:
    """The compiler output ninja printed under each `FAILED: <output>` line, by output."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in error.splitlines():
        start = _SECTION_START.match(line)
        if start:
            current = sections.setdefault(start.group(1), [])
            continue
        if _SECTION_END.match(line):
            current = None
        elif current is not None:
            current.append(line)
    return sections


# Errors a missing declaration can cause (GCC, Clang and nvcc's EDG front end). Anything else
# (expected ';', expected primary-expression, invalid conversion, ...) is the source's own.
_DECLARATION_KIND = re.compile(
    r"was not declared|has not been declared|is not a member of|does not name a (?:type|template)|"
    r"has no member|no member named|incomplete type|is not a (?:class |variable |function |alias )?template|"
    r"expected template-name|expected (?:type-specifier|class-name|nested-name-specifier)|"
    r"is not a namespace|not a namespace-name|must be available|undeclared identifier|unknown type name|"
    r"no template named|is undefined|must be a class or namespace name|is not a type|not a type name|"
    r"has no storage class or type specifier|explicit type is missing|has not been defined")
_QUOTED = re.compile(r"[‘'\"`]([^’'\"`]+)[’'\"`]")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _names(message: str) -> set[str] | None:
    """The names whose missing declaration a diagnostic reports; None when it cannot tell."""
    message = message.split("; did you mean")[0]
    member = re.search(r"member named [‘'\"`]([^’'\"`]+)", message)
    if member:
        quoted = [member.group(1)]
    elif "incomplete type" in message:
        quoted = _QUOTED.findall(message)
        return {n for q in quoted for n in _NAME.findall(q)} or None
    else:
        quoted = _QUOTED.findall(message)[:1]
    if not quoted:
        return None
    last = re.sub(r"<.*", "", quoted[0]).split("::")[-1].strip()
    return {last} if _NAME.fullmatch(last) else None


def could_be_missing_header(unit_lines: list[str], full_names: set[str] | None = None) -> bool:
    """Whether a unit built without some torch header may have failed only for that reason.

    `unit_lines`: the unit's compiler output with the build folder stripped from paths. True
    when any error is outside the candidate's own file (a header, the command line) or of the
    declaration kind (the include paths are the same in every form: a missing file is not).
    With `full_names` (every identifier the full header's preprocessed text contains), a
    declaration error about a name the full header never spells cannot be fixed by it:
    `undeclared_thing` stays undeclared, while `nn` or `queue` may not."""
    errors = error_lines("\n".join(unit_lines))
    if not errors:
        return True  # the compiler crashed or was killed: nothing says it was the source
    for line in errors:
        if not _LOCATION.match(line):
            return True  # in a header, on the command line, in the compiler or the linker
        if not _DECLARATION_KIND.search(line):
            continue  # the source's own syntax or type error
        names = _names(line)
        if full_names is None or names is None or names & full_names:
            return True
    return False
