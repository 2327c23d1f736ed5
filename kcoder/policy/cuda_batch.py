"""A CUDA candidate for any batch size, from its renderings at the traced batch sizes.

The cuda target writes sizes, strides and grids as literals (geometry.py), so a candidate
rendered at batch sizes 2048, 3 and 5 reads differently in those numbers. Where the three texts
differ only in integer literals, and each such literal is a * batch + b at every traced size
(whole a > 0 and b), the literal is written as that expression of the run-time batch
(`kc_batch`: the C++ unit's global that forward sets, and in the CUDA unit the kernel argument
`a.batch` under the same name, emit_cuda.BATCH_IN_KERNELS). Anything else (a layout, an index
width, a float, a literal that is not affine in the batch) leaves the candidate made for the
problem's own shapes.

A literal that follows the batch is no longer a compile-time constant: its `constexpr` or
`static const` line becomes a `const` one, and a name declared there must not feed what needs
a constant (another constexpr, a template argument, a shared array's size, an unroll count);
the candidate is then not made generic. 32-bit offsets stay right because the binding's reach
check (emit_cuda.span_check) is among the literals that follow the batch: at a batch whose
operands reach past them, the binding raises and names it.
"""

from __future__ import annotations

import bisect
import re

from kcoder.policy.batchdims import BATCH_VAR, affine

TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[A-Za-z]*|\S")
INTEGER = re.compile(r"(\d+)(LL|u)?")
SOURCES = re.compile(r'(?:CPP|CUDA)_SOURCE = r"""\n(.*?)"""', re.S)
# where a run-time value cannot stand (C++ wants a constant expression there)
NEEDS_CONSTANT = re.compile(r"constexpr|template|__shared__|#pragma|static_assert|__launch_bounds__")
DECLARED = re.compile(r"([A-Za-z_]\w*)\s*=(?!=)")


def generalize(texts: list[str], sizes: list[int]) -> str | None:
    """texts[0] (rendered at batch sizes[0]) with every literal that differs between the
    renderings written in terms of the run-time batch; None when they differ in anything else."""
    tokens = [list(TOKEN.finditer(t)) for t in texts]
    if any(len(t) != len(tokens[0]) for t in tokens[1:]):
        return None
    sources = [m.span(1) for m in SOURCES.finditer(texts[0])]
    edits: list[tuple[int, int, str]] = []
    for group in zip(*tokens, strict=True):
        words = [m.group() for m in group]
        if all(w == words[0] for w in words[1:]):
            continue
        start, end = group[0].span()
        expr = _expression(words, sizes)
        if expr is None or not any(lo <= start < hi for lo, hi in sources):
            return None
        edits.append((start, end, expr))
    return _apply(texts[0], edits)


def _expression(words: list[str], sizes: list[int]) -> str | None:
    """The literal as an expression of the batch (LL and unsigned kept, others 64-bit); None when the words
    are not integer literals of one kind, affine in the batch."""
    parsed = [INTEGER.fullmatch(w) for w in words]
    if any(p is None for p in parsed) or len({p.group(2) for p in parsed}) != 1:
        return None
    fit = affine([int(p.group(1)) for p in parsed], sizes)
    if fit is None:
        return None
    a, b = fit
    value = f"{BATCH_VAR} * {a}LL" + (f" + {b}LL" if b > 0 else f" - {-b}LL" if b < 0 else "")
    suffix = parsed[0].group(2)
    if suffix == "LL":
        return f"({value})"
    if suffix == "u":
        return f"((unsigned)({value}))"
    # 64-bit: the declaration it initializes gives the type (an int one is guarded by the binding's
    # reach check, emit_cuda.span_check; a cast to int here could wrap in a 64-bit unit)
    return f"((long long)({value}))"


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str | None:
    """`text` with the edits made, each edited line a run-time one; None where C++ needs a
    constant that now follows the batch."""
    if not edits:
        return text
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    lines = text.split("\n")
    edited: dict[int, list[tuple[int, int, str]]] = {}
    for start, end, expr in edits:
        row = bisect.bisect_right(starts, start) - 1
        edited.setdefault(row, []).append((start - starts[row], end - starts[row], expr))
    for row, changes in edited.items():
        line = lines[row]
        for lo, hi, expr in sorted(changes, reverse=True):
            line = line[:lo] + expr + line[hi:]
        stripped = line.lstrip()
        names: set[str] = set()
        if stripped.startswith("constexpr "):
            line = line.replace("constexpr ", "const ", 1)
            names = set(DECLARED.findall(line))
        elif stripped.startswith("static const "):
            line = line.replace("static const ", "const ", 1)
        if NEEDS_CONSTANT.search(line) or not _constant_free(lines, row, names):
            return None
        lines[row] = line
    return "\n".join(lines)


def _constant_free(lines: list[str], row: int, names: set[str]) -> bool:
    """No line after `row` up to the end of its function (a "}" at column 0) needs `names` to
    be constants."""
    for line in lines[row + 1:]:
        if line == "}":
            return True
        if names and NEEDS_CONSTANT.search(line) and names & set(re.findall(r"[A-Za-z_]\w*", line)):
            return False
    return True
