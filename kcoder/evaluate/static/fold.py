"""Strings a candidate's Python builds from constants, read as the program would build them.

`"__clo" + "sure__"`, `"_" * 2 + "code__"`, `f"{A}{B}"`, `"%s%s" % (A, B)`, `"".join([...])`,
`"{}{}".format(...)`, `"__edoc__"[::-1]`, `"__CODE__".lower()`, `chr(95)`: each is one string
the name and native checks must read whole. Names count when the module binds them exactly
once (in any scope), by `name = ` such an expression (`A = "cudaStre"`; `CPP = A + "amCreate"`). Anything else (a
parameter, a loop variable, a call of the candidate's own) does not fold: the build service
checks the strings that reach the compiler (static/compiled.py) whatever made them.

Bounded: no intermediate string over MAX_CHARS, no integer over MAX_INT, no format width or
precision of five digits, so a folding never costs more than reading the file.
"""

from __future__ import annotations

import ast
import re
from typing import Any

MAX_CHARS = 1 << 20
MAX_INT = 1 << 40
_WIDE = re.compile(r"\d{5,}")  # `"%99999999s"`, `"{:>99999999}"`: a width that would allocate
# A replacement field that reads an attribute or item, or takes its width from an argument.
_FIELD_REACHES = re.compile(r"\{[^{}]*[.\[{]")
_METHODS = {"lower", "upper", "casefold", "capitalize", "title", "swapcase", "strip", "lstrip", "rstrip",
            "replace", "removeprefix", "removesuffix", "join", "format", "zfill", "center", "ljust", "rjust",
            "expandtabs"}
_WIDTH_METHODS = {"zfill", "center", "ljust", "rjust", "expandtabs"}


class _Unfoldable(Exception):
    pass


def _bounded(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise _Unfoldable
        return value
    if isinstance(value, str):
        if len(value) > MAX_CHARS:
            raise _Unfoldable
        return value
    if isinstance(value, (tuple, list)):
        if sum(len(v) if isinstance(v, str) else 1 for v in value) > MAX_CHARS:
            raise _Unfoldable
        return value
    raise _Unfoldable


def bindings(tree: ast.AST) -> tuple[dict[str, ast.expr], set[str]]:
    """Names the module binds exactly once, by `name = value` (any scope): name -> value; and
    every name it binds at all."""
    counts: dict[str, int] = {}
    values: dict[str, ast.expr] = {}

    def bind(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bind(node.id)
        elif isinstance(node, ast.arg):
            bind(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bind((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name)
                bind(name)  # rebound elsewhere: never a constant
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bind(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bind(node.rest)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    return {name: value for name, value in values.items() if counts.get(name) == 1}, set(counts)


class Folder:
    """Folds expressions of one module, memoised."""

    def __init__(self, tree: ast.AST) -> None:
        self.bindings, self.bound = bindings(tree)
        self.memo: dict[int, Any] = {}
        self.active: set[str] = set()

    def string(self, node: ast.AST | None) -> str | None:
        """The string `node` always evaluates to, or None."""
        value = self.value(node)
        return value if isinstance(value, str) else None

    def value(self, node: ast.AST | None) -> Any:
        """The constant (str, int, tuple or list of them) `node` always evaluates to, or None."""
        if node is None:
            return None
        key = id(node)
        if key not in self.memo:
            try:
                self.memo[key] = self._fold(node)
            except (_Unfoldable, ValueError, TypeError, IndexError, KeyError, OverflowError, RecursionError):
                self.memo[key] = None
        return self.memo[key]

    def _sub(self, node: ast.AST) -> Any:
        value = self.value(node)
        if value is None:
            raise _Unfoldable
        return value

    def _fold(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
                return _bounded(node.value)
            raise _Unfoldable
        if isinstance(node, ast.Name):
            value = self.bindings.get(node.id)
            if value is None or node.id in self.active:
                raise _Unfoldable
            self.active.add(node.id)
            try:
                return self._sub(value)
            finally:
                self.active.discard(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                raise _Unfoldable
            items = [self._sub(e) for e in node.elts]
            return _bounded(tuple(items) if isinstance(node, ast.Tuple) else items)
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self._sub(node.operand)
            if not isinstance(operand, int):
                raise _Unfoldable
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.JoinedStr):
            return _bounded("".join(self._piece(v) for v in node.values))
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise _Unfoldable

    def _binop(self, node: ast.BinOp) -> Any:
        left, right = self._sub(node.left), self._sub(node.right)
        if isinstance(node.op, ast.Add):
            if type(left) is not type(right):
                raise _Unfoldable
            return _bounded(left + right)
        if isinstance(node.op, ast.Mult):
            if isinstance(left, int) and isinstance(right, int):
                return _bounded(left * right)
            seq, times = (left, right) if isinstance(right, int) else (right, left)
            if not isinstance(times, int) or isinstance(times, bool):
                raise _Unfoldable
            size = len(seq) * max(times, 0)
            if size > MAX_CHARS:
                raise _Unfoldable
            return _bounded(seq * times)
        if isinstance(node.op, ast.Sub) and isinstance(left, int) and isinstance(right, int):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mod) and isinstance(left, str):
            if _WIDE.search(left) or "*" in left:
                raise _Unfoldable
            return _bounded(left % right)
        raise _Unfoldable

    def _piece(self, node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if not isinstance(node, ast.FormattedValue):
            raise _Unfoldable
        value = self._sub(node.value)
        if node.conversion == ord("r"):
            value = repr(value)
        elif node.conversion == ord("a"):
            value = ascii(value)
        elif node.conversion == ord("s"):
            value = str(value)
        spec = "".join(self._piece(v) for v in node.format_spec.values) if node.format_spec else ""
        if _WIDE.search(spec):
            raise _Unfoldable
        return format(value, spec)

    def _subscript(self, node: ast.Subscript) -> Any:
        base = self._sub(node.value)
        if not isinstance(base, (str, tuple, list)):
            raise _Unfoldable
        if isinstance(node.slice, ast.Slice):
            parts = [None if p is None else self._sub(p) for p in (node.slice.lower, node.slice.upper, node.slice.step)]
            if not all(p is None or isinstance(p, int) for p in parts):
                raise _Unfoldable
            return _bounded(base[slice(*parts)])
        index = self._sub(node.slice)
        if not isinstance(index, int):
            raise _Unfoldable
        return _bounded(base[index])

    def _call(self, node: ast.Call) -> Any:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise _Unfoldable
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("chr", "str") and len(node.args) == 1 and not node.keywords:
            if func.id in self.bound:
                raise _Unfoldable  # the candidate's own `chr`
            arg = self._sub(node.args[0])
            if func.id == "chr":
                if not isinstance(arg, int):
                    raise _Unfoldable
                return chr(arg)
            return _bounded(str(arg))
        if not (isinstance(func, ast.Attribute) and func.attr in _METHODS):
            raise _Unfoldable
        receiver = self._sub(func.value)
        if not isinstance(receiver, str):
            raise _Unfoldable
        args = [self._sub(a) for a in node.args]
        kwargs = {k.arg: self._sub(k.value) for k in node.keywords}
        if func.attr == "join":
            if len(args) != 1 or kwargs or not isinstance(args[0], (tuple, list)):
                raise _Unfoldable
            return _bounded(receiver.join(args[0]))
        if func.attr == "format" and (_WIDE.search(receiver) or _FIELD_REACHES.search(receiver)):
            raise _Unfoldable
        if func.attr in _WIDTH_METHODS and any(isinstance(a, int) and a > 10000 for a in args):
            raise _Unfoldable
        if func.attr == "replace" and len(receiver) * max(len(a) for a in args if isinstance(a, str)) > MAX_CHARS:
            raise _Unfoldable
        return _bounded(getattr(receiver, func.attr)(*args, **kwargs))
