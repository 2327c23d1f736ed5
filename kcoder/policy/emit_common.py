"""What the C++ and CUDA renderers share: statement closures and load substitution."""

from __future__ import annotations

import re
from collections.abc import Callable

from kcoder.policy.kernel import Kernel, Stmt

LoadFn = Callable[[int], str]

_VAR = re.compile(r"\bv_\w+")
_LOAD = re.compile(r"LOAD(\d+)")


def deps(stmt: Stmt) -> list[str]:
    return _VAR.findall(stmt.expr)


def closure(kernel: Kernel, targets: list[str]) -> list[Stmt]:
    """The full-context statements the `targets` need, in definition order (row values and
    stage results are computed outside the element loop and are not included)."""
    by_var = {s.var: s for s in kernel.stmts if not s.row}
    need: set[str] = set()
    stack = [t for t in targets if t in by_var]
    while stack:
        var = stack.pop()
        if var in need:
            continue
        need.add(var)
        stack.extend(d for d in deps(by_var[var]) if d in by_var)
    return [s for s in kernel.stmts if s.var in need]


def substitute(expr: str, load: LoadFn) -> str:
    return _LOAD.sub(lambda m: load(int(m.group(1))), expr)


def row_levels(kernel: Kernel) -> dict[int, list[Stmt]]:
    """Row statements by the stage after which they are computed (-1: at the row's start)."""
    out: dict[int, list[Stmt]] = {}
    for s in kernel.stmts:
        if s.row:
            out.setdefault(s.level, []).append(s)
    return out

