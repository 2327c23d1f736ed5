"""The pointwise op table: ATen op name -> one C++ expression (the same text serves the C++
(cpu) and CUDA templates: float math functions only, no std:: overloads).

Comparisons are written so that NaN propagates as PyTorch's kernels do (relu(NaN) is NaN,
maximum(NaN, x) is NaN): `x < 0 ? 0 : x` rather than `x > 0 ? x : 0`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Render = Callable[[list[Any], dict[str, Any]], str]


def lit(value: Any) -> str:
    """A Python scalar as a C++ literal (float32 arithmetic)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    cexpr = getattr(value, "cexpr", None)  # a constant that follows the batch (batchdims.BatchScalar)
    if cexpr is not None:
        return cexpr
    if isinstance(value, (int, float)):
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return f"{v!r}f" if "e" in repr(v) or "." in repr(v) else f"{v!r}.0f"
    return str(value)


def _a(args: list[Any], i: int, default: Any = None) -> str:
    value = args[i] if i < len(args) and args[i] is not None else default
    return lit(value) if not isinstance(value, str) else value


def _gelu(a: list[Any], kw: dict[str, Any]) -> str:
    x = a[0]
    if kw.get("approximate", "none") == "tanh":
        return f"(0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x}))))"
    return f"(0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f)))"


def _pow(a: list[Any], kw: dict[str, Any]) -> str:
    base, exp = a[0], a[1]
    if isinstance(exp, (int, float)) and not isinstance(base, (int, float)):
        special = {2: f"({base} * {base})", 3: f"({base} * {base} * {base})", 1: f"({base})",
                   0.5: f"sqrtf({base})", -1: f"(1.0f / {base})", 0: "1.0f"}
        if float(exp) in special:
            return special[float(exp)]
    return f"powf({_a(a, 0)}, {_a(a, 1)})"


def _clamp(x: str, lo: Any, hi: Any) -> str:
    out = x
    if lo is not None:
        out = f"({out} < {_a([lo], 0)} ? {_a([lo], 0)} : {out})"
    if hi is not None:
        out = f"({out} > {_a([hi], 0)} ? {_a([hi], 0)} : {out})"
    return out


def _elu(a: list[Any], kw: dict[str, Any]) -> str:
    x, alpha, scale, iscale = a[0], _a(a, 1, 1.0), _a(a, 2, 1.0), _a(a, 3, 1.0)
    return f"({x} > 0.0f ? {scale} * {x} : {scale} * {alpha} * expm1f({x} * {iscale}))"


def _mish(a: list[Any], kw: dict[str, Any]) -> str:
    """x tanh(softplus(x)) = x n / (n + 2) with n = e^x (e^x + 2): one exp instead of exp, log1p
    and tanh, and no cancellation anywhere (n / (n + 2) ~ e^x for x << 0). Above 20 the factor is 1
    in float32 (and n overflows past 44). The repeated exp is one after CSE (inline, pure)."""
    x = a[0]
    n = f"(expf({x}) * (expf({x}) + 2.0f))"
    return f"({x} > 20.0f ? {x} : {x} * {n} / ({n} + 2.0f))"


def _softplus(a: list[Any], kw: dict[str, Any]) -> str:
    x, beta, th = a[0], _a(a, 1, 1.0), _a(a, 2, 20.0)
    return f"({x} * {beta} > {th} ? {x} : log1pf(expf({x} * {beta})) / {beta})"


def _add(sign: str) -> Render:
    def render(a: list[Any], kw: dict[str, Any]) -> str:
        alpha = kw.get("alpha", a[2] if len(a) > 2 else None)
        other = _a(a, 1) if alpha in (None, 1) else f"({lit(alpha)} * {_a(a, 1)})"
        return f"({_a(a, 0)} {sign} {other})"
    return render


def _div(a: list[Any], kw: dict[str, Any]) -> str:
    mode = kw.get("rounding_mode")
    q = f"({_a(a, 0)} / {_a(a, 1)})"
    return {"trunc": f"truncf{q}", "floor": f"floorf{q}"}.get(mode, q)


def _binary(op: str) -> Render:
    return lambda a, kw: f"({_a(a, 0)} {op} {_a(a, 1)})"


def _unary(fmt: str) -> Render:
    return lambda a, kw: fmt.format(x=_a(a, 0))


POINTWISE: dict[str, Render] = {
    "add": _add("+"), "sub": _add("-"), "mul": _binary("*"), "div": _div,
    "rsub": lambda a, kw: f"({_a(a, 1)} - {lit(kw.get('alpha', 1))} * {_a(a, 0)})",
    "neg": _unary("(-{x})"), "abs": _unary("fabsf({x})"), "exp": _unary("expf({x})"),
    "exp2": _unary("exp2f({x})"), "log": _unary("logf({x})"), "log2": _unary("log2f({x})"),
    "log10": _unary("log10f({x})"), "log1p": _unary("log1pf({x})"), "expm1": _unary("expm1f({x})"),
    "sqrt": _unary("sqrtf({x})"), "rsqrt": _unary("(1.0f / sqrtf({x}))"), "sin": _unary("sinf({x})"),
    "cos": _unary("cosf({x})"), "tan": _unary("tanf({x})"), "tanh": _unary("tanhf({x})"),
    "atan": _unary("atanf({x})"), "asin": _unary("asinf({x})"), "acos": _unary("acosf({x})"),
    "sinh": _unary("sinhf({x})"), "cosh": _unary("coshf({x})"),
    "sigmoid": _unary("(1.0f / (1.0f + expf(-({x}))))"), "erf": _unary("erff({x})"),
    "erfc": _unary("erfcf({x})"), "reciprocal": _unary("(1.0f / {x})"),
    "floor": _unary("floorf({x})"), "ceil": _unary("ceilf({x})"), "trunc": _unary("truncf({x})"),
    "round": _unary("nearbyintf({x})"), "square": _unary("({x} * {x})"),
    "sign": _unary("((float)(({x} > 0.0f) - ({x} < 0.0f)))"),  # sign(NaN) is 0 in PyTorch
    "relu": _unary("({x} < 0.0f ? 0.0f : {x})"), "gelu": _gelu,
    "silu": _unary("({x} / (1.0f + expf(-({x}))))"),
    "hardtanh": lambda a, kw: _clamp(a[0], a[1] if len(a) > 1 else -1.0, a[2] if len(a) > 2 else 1.0),
    "leaky_relu": lambda a, kw: f"({a[0]} < 0.0f ? {a[0]} * {_a(a, 1, 0.01)} : {a[0]})",
    "elu": _elu, "softplus": _softplus,
    "hardsigmoid": lambda a, kw: _clamp(f"({a[0]} / 6.0f + 0.5f)", 0.0, 1.0),
    "hardswish": lambda a, kw: f"({a[0]} * {_clamp(f'({a[0]} + 3.0f)', 0.0, 6.0)} / 6.0f)",
    "mish": _mish,
    "clamp": lambda a, kw: _clamp(a[0], a[1] if len(a) > 1 else kw.get("min"),
                                  a[2] if len(a) > 2 else kw.get("max")),
    "clamp_min": lambda a, kw: _clamp(a[0], a[1], None),
    "clamp_max": lambda a, kw: _clamp(a[0], None, a[1]),
    "threshold": lambda a, kw: f"({a[0]} <= {_a(a, 1)} ? {_a(a, 2)} : {a[0]})",
    "where": lambda a, kw: f"({_a(a, 0)} ? {_a(a, 1)} : {_a(a, 2)})",
    "maximum": lambda a, kw: f"(({a[0]} > {a[1]} || {a[0]} != {a[0]}) ? {a[0]} : {a[1]})",
    "minimum": lambda a, kw: f"(({a[0]} < {a[1]} || {a[0]} != {a[0]}) ? {a[0]} : {a[1]})",
    "fmax": lambda a, kw: f"fmaxf({a[0]}, {a[1]})", "fmin": lambda a, kw: f"fminf({a[0]}, {a[1]})",
    "pow": _pow, "atan2": lambda a, kw: f"atan2f({_a(a, 0)}, {_a(a, 1)})",
    "fmod": lambda a, kw: f"fmodf({_a(a, 0)}, {_a(a, 1)})",
    "eq": _binary("=="), "ne": _binary("!="), "gt": _binary(">"), "ge": _binary(">="),
    "lt": _binary("<"), "le": _binary("<="),
    "logical_not": _unary("(!{x})"), "bitwise_not": _unary("(!{x})"),
    "logical_and": _binary("&&"), "logical_or": _binary("||"), "bitwise_and": _binary("&&"),
    "bitwise_or": _binary("||"), "isnan": _unary("({x} != {x})"),
    "isinf": _unary("(fabsf({x}) == INFINITY)"),
}


def render(op: str, args: list[Any], kwargs: dict[str, Any], ctype: str) -> str:
    """The C++ expression of pointwise `op` over `args` (C++ names or Python scalars)."""
    if op == "const":
        return f"(({ctype}){lit(args[0])})"
    if op == "iota":  # the position along the (single) reduced dim: the row loop's index
        return f"(({ctype})r)"
    if op == "cast":
        return f"(({ctype}){_a(args, 0)})"
    expr = POINTWISE[op](args, kwargs)
    return expr if ctype == "float" else f"(({ctype}){expr})"
