"""A candidate's tuning space: read TUNE / CONFIG / TUNE_CONSTRAINTS, check them, rewrite CONFIG.

Everything is read statically with `ast` (the candidate is never imported here) and the
constraints are evaluated by a small interpreter over a whitelist of expression nodes, never
by `eval`: a candidate is untrusted text. Rewriting replaces only the bytes of the CONFIG
literal, so the rest of the file stays byte-identical and the result is a plain candidate.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Value = int | float | str | bool
Config = dict[str, Value]
MAX_POINTS = 100_000  # a space this large is a typo, not a plan


class SpaceError(ValueError):
    """A tuning declaration that cannot be used; the message names the file and the problem."""


@dataclass
class Span:
    """Byte offsets of a literal's value in the file's UTF-8 text."""

    start: int
    end: int


@dataclass
class Space:
    """The declared space of one candidate file."""

    path: Path
    source: str
    params: dict[str, list[Value]]
    current: Config
    constraints: list[str] = field(default_factory=list)
    spans: dict[str, Span] = field(default_factory=dict)  # TUNE, CONFIG, TUNE_CONSTRAINTS

    @property
    def size(self) -> int:
        """Number of points, constraints not applied."""
        size = 1
        for values in self.params.values():
            size *= len(values)
        return size

    def points(self) -> Iterator[Config]:
        """Every point, the current CONFIG first (the hand-picked choice is always measured)."""
        yield dict(self.current)
        names = list(self.params)
        for combo in itertools.product(*(self.params[n] for n in names)):
            config = dict(zip(names, combo, strict=True))
            if config != self.current:
                yield config

    def violated(self, config: Config) -> str | None:
        """The first constraint `config` breaks, or None when it satisfies all of them."""
        for text in self.constraints:
            if not evaluate_constraint(text, config):
                return text
        return None

    def rewrite(self, config: Config) -> str:
        """The file's text with CONFIG = `config`; every other byte unchanged."""
        self.check_config(config, "the requested config")
        data = self.source.encode()
        span = self.spans["CONFIG"]
        return (data[: span.start] + format_config(config).encode() + data[span.end:]).decode()

    def kernel_key(self) -> str:
        """Hash of the file without its TUNE/CONFIG/TUNE_CONSTRAINTS literals: points measured
        for one kernel stay valid when only the space or the current choice changes."""
        data = self.source.encode()
        out, pos = b"", 0
        for span in sorted(self.spans.values(), key=lambda s: s.start):
            out += data[pos: span.start] + b"<tune>"
            pos = span.end
        return hashlib.sha256(out + data[pos:]).hexdigest()

    def check_config(self, config: Config, what: str) -> None:
        """SpaceError unless `config` names exactly the parameters, each with a declared value."""
        if set(config) != set(self.params):
            missing, extra = set(self.params) - set(config), set(config) - set(self.params)
            raise SpaceError(f"{self.path}: {what} must name exactly the TUNE parameters"
                             + (f"; missing {', '.join(sorted(missing))}" if missing else "")
                             + (f"; unknown {', '.join(sorted(extra))}" if extra else ""))
        for name, value in config.items():
            if not any(_same(value, v) for v in self.params[name]):
                raise SpaceError(f"{self.path}: {what} sets {name}={value!r}, which is not in "
                                 f"TUNE[{name!r}] = {self.params[name]!r}")


def _same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b  # True is not 1 here: a bool knob stays a bool


def config_key(config: Config) -> str:
    """Canonical text of a point (stable across runs and key orders)."""
    return json.dumps(config, sort_keys=True)


def format_config(config: Config) -> str:
    """A CONFIG literal in the file's own style: a one-line dict literal."""
    return "{" + ", ".join(f"{json.dumps(k)}: {_literal(v)}" for k, v in config.items()) + "}"


def _literal(value: Value) -> str:
    return repr(value) if not isinstance(value, str) else json.dumps(value)


# --- reading the declarations ------------------------------------------------------------------
def load_space(path: str | Path) -> Space:
    """The space declared in candidate file `path`; SpaceError when it is missing or malformed."""
    path = Path(path)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(f"{path}: cannot be read ({exc})") from None
    return parse_space(source, path)


def parse_space(source: str, path: str | Path = "<candidate>") -> Space:
    """The space declared in `source` (the text of the file `path`, named in errors)."""
    path = Path(path)
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise SpaceError(f"{path}:{exc.lineno}: not valid Python ({exc.msg})") from None
    nodes = _module_literals(tree, path)
    if "TUNE" not in nodes:
        raise SpaceError(f"{path}: declares no TUNE space; add a module-level literal such as "
                         'TUNE = {"BLOCK": [128, 256]} and CONFIG = {"BLOCK": 256}, passed to the kernel')
    if "CONFIG" not in nodes:
        raise SpaceError(f"{path}: declares TUNE but no CONFIG (the current choice, one value per parameter)")
    params = _params(_literal_value(nodes["TUNE"], "TUNE", path), path)
    current = _config(_literal_value(nodes["CONFIG"], "CONFIG", path), path)
    constraints = _constraints(nodes, path, set(params))
    offsets = _line_offsets(source)
    spans = {name: Span(offsets[n.lineno - 1] + n.col_offset, offsets[n.end_lineno - 1] + n.end_col_offset)
             for name, n in nodes.items() if n.end_lineno is not None and n.end_col_offset is not None}
    space = Space(path, source, params, current, constraints, spans)
    space.check_config(current, "CONFIG")
    if space.size > MAX_POINTS:
        raise SpaceError(f"{path}: TUNE has {space.size} points (more than {MAX_POINTS}); narrow it")
    return space


def _module_literals(tree: ast.Module, path: Path) -> dict[str, ast.expr]:
    """Value nodes of the module-level assignments to TUNE, CONFIG and TUNE_CONSTRAINTS."""
    found: dict[str, ast.expr] = {}
    for stmt in tree.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        if target in ("TUNE", "CONFIG", "TUNE_CONSTRAINTS"):
            if target in found:
                raise SpaceError(f"{path}:{stmt.lineno}: {target} is assigned more than once; declare it once")
            found[target] = value
    return found


def _literal_value(node: ast.expr, name: str, path: Path) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise SpaceError(f"{path}:{node.lineno}: {name} must be a plain literal (no names, calls or "
                         "expressions), so kcoder can read and rewrite it without running the file") from None


def _params(value: Any, path: Path) -> dict[str, list[Value]]:
    if not isinstance(value, dict) or not value:
        raise SpaceError(f"{path}: TUNE must be a non-empty dict of parameter name -> list of values")
    params: dict[str, list[Value]] = {}
    for name, values in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SpaceError(f"{path}: TUNE key {name!r} is not an identifier (it becomes a macro or name)")
        if not isinstance(values, (list, tuple)) or not values:
            raise SpaceError(f"{path}: TUNE[{name!r}] must be a non-empty list of values")
        bad = [v for v in values if not isinstance(v, (int, float, str, bool))]
        if bad:
            raise SpaceError(f"{path}: TUNE[{name!r}] holds {bad[0]!r}; values are ints, floats, strings or bools")
        if len({(type(v), v) for v in values}) != len(values):
            raise SpaceError(f"{path}: TUNE[{name!r}] lists a value twice")
        params[name] = list(values)
    return params


def _config(value: Any, path: Path) -> Config:
    if not isinstance(value, dict):
        raise SpaceError(f"{path}: CONFIG must be a dict literal of parameter name -> value")
    return dict(value)


def _constraints(nodes: dict[str, ast.expr], path: Path, names: set[str]) -> list[str]:
    if "TUNE_CONSTRAINTS" not in nodes:
        return []
    value = _literal_value(nodes["TUNE_CONSTRAINTS"], "TUNE_CONSTRAINTS", path)
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
        raise SpaceError(f"{path}: TUNE_CONSTRAINTS must be a list of expression strings, "
                         "e.g. [\"BLOCK * VEC <= 2048\"]")
    for text in value:
        try:
            compile_constraint(text, names)
        except SpaceError as exc:
            raise SpaceError(f"{path}: TUNE_CONSTRAINTS {text!r}: {exc}") from None
    return list(value)


def _line_offsets(source: str) -> list[int]:
    """Byte offset of each line's start (ast columns are UTF-8 byte offsets)."""
    offsets, pos = [], 0
    for line in source.encode().splitlines(keepends=True):
        offsets.append(pos)
        pos += len(line)
    return offsets + [pos]


# --- constraints: a tiny, safe expression interpreter -----------------------------------------
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCS = {"min": min, "max": max, "abs": abs}
_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd,
            ast.Not, ast.Compare, ast.Name, ast.Load, ast.Constant, ast.Call, ast.IfExp,
            *_BINOPS, *_CMPOPS)


def compile_constraint(text: str, names: set[str]) -> ast.Expression:
    """Parse a constraint; SpaceError for syntax, a node outside the whitelist or an unknown name."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise SpaceError(f"not a valid expression ({exc.msg})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise SpaceError(f"{type(node).__name__} is not allowed (arithmetic, comparisons, and/or/not, "
                             "min/max/abs only)")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                                               and not node.keywords):
            raise SpaceError("only min(), max() and abs() may be called")
        if isinstance(node, ast.Name) and node.id not in names and node.id not in _FUNCS:
            raise SpaceError(f"unknown name {node.id!r} (the TUNE parameters are {', '.join(sorted(names))})")
    return tree


def evaluate_constraint(text: str, config: Config) -> bool:
    """Whether `config` satisfies constraint `text`; an expression that fails (a division by
    zero, a type mismatch) counts as violated, since the point cannot be reasoned about."""
    tree = _compiled(text, frozenset(config))
    try:
        return bool(_eval(tree.body, config))
    except (ArithmeticError, TypeError, ValueError):
        return False


@functools.lru_cache(maxsize=256)
def _compiled(text: str, names: frozenset[str]) -> ast.Expression:
    return compile_constraint(text, set(names))  # a space's constraints are checked per point: parse once


def _eval(node: ast.expr, env: Config) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        # keep a hostile constraint from eating memory: no huge powers or repeated strings
        if isinstance(node.op, (ast.Pow, ast.LShift)) and abs(right) > 64:
            raise ValueError("exponent too large")
        if isinstance(node.op, ast.Mult) and (isinstance(left, str) or isinstance(right, str)):
            raise TypeError("strings are not multiplied")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        return not value if isinstance(node.op, ast.Not) else -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, env) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _FUNCS[node.func.id](*(_eval(a, env) for a in node.args))
    raise ValueError(f"unsupported expression {type(node).__name__}")
