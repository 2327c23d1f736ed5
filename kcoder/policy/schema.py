"""The captured graph's schema: what capture.py's child may hand the optimize process.

The child runs the problem file (for an MCP client's problem, code kcoder did not write), so
its JSON is data from outside: every field is checked here before graph.py reads it. Names
are identifiers, op names are ATen/prims ops that torch's registry knows or one of the few
forms the capture itself writes, numbers are numbers, shapes and strides lists of ints,
strings short words (dtypes, devices, modes), references name an earlier node. Nothing in a
graph that passes can carry code into the text the policy renders (forward's steps, C++).
"""

from __future__ import annotations

import re
from typing import Any

MAX_NODES = 100_000
MAX_RANK = 128  # dims of a shape: far above any module (tests/problems/many_dims.py has 56)
MAX_DEPTH = 8  # nesting of argument lists
MAX_TEXT = 200  # characters in any name or string value

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
STATE_KEY = re.compile(r"\w+(?:\.\w+)*", re.ASCII)  # a state-dict key: conv.weight, layers.0.bias
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]*", re.ASCII)  # tanh, floor, torch.float32, cpu, cuda:0
ATEN = re.compile(r"(aten|prims)\.([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)", re.ASCII)
# What the capture writes for what is not an ATen op (graph.py leaves those unsupported).
OTHER = re.compile(r"(get_attr|call_module|call_method|call_function):[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
FIXED_OPS = ("placeholder", "constant", "<built-in function getitem>")
ROLES = ("param", "buffer", "constant_buffer", "input")
NODE_KEYS = {
    "placeholder": {"name", "op", "role", "key", "stride", "shape", "dtype"},
    "constant": {"name", "op", "value", "shape", "dtype"},
    "call": {"name", "op", "args", "kwargs", "shape", "dtype", "items"},
    "other": {"name", "op", "shape", "dtype"},
}


class GraphSchemaError(ValueError):
    """The captured graph is not what kcoder's capture writes; str() says where and why."""


def validate_graph(data: Any) -> dict[str, Any]:
    """`data` (capture.py's JSON, parsed) if it fits the schema, else GraphSchemaError naming
    the field (`nodes[3].name: ...`). Use it on every graph before graph.load_graph."""
    if not isinstance(data, dict) or set(data) != {"nodes", "outputs", "n_forward_args"}:
        raise GraphSchemaError("the top level must be an object with exactly nodes, outputs and n_forward_args")
    _count(data["n_forward_args"], "n_forward_args")
    nodes = data["nodes"]
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        raise GraphSchemaError(f"nodes: a list of at most {MAX_NODES} nodes expected")
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        _node(node, f"nodes[{i}]", seen, data["n_forward_args"])
        seen.add(node["name"])
    if not isinstance(data["outputs"], list):
        raise GraphSchemaError("outputs: a list expected")
    _value(data["outputs"], "outputs", seen, 0)
    return data


def _node(node: Any, where: str, seen: set[str], n_inputs: int) -> None:
    if not isinstance(node, dict):
        raise GraphSchemaError(f"{where}: an object expected")
    name = _text(node.get("name"), f"{where}.name", IDENT)
    if name in seen:
        raise GraphSchemaError(f"{where}.name: {name!r} is defined twice")
    where = f"{where} ({name})"
    op = node.get("op")
    form = _op_form(op, f"{where}.op")
    extra = set(node) - NODE_KEYS[form]
    if extra:
        raise GraphSchemaError(f"{where}: unexpected field(s) {', '.join(sorted(map(repr, extra)))}")
    _meta(node, where)
    if form == "placeholder":
        role = node.get("role")
        if role not in ROLES:
            raise GraphSchemaError(f"{where}.role: one of {', '.join(ROLES)} expected, got {_show(role)}")
        if role == "input":
            key = _count(node.get("key"), f"{where}.key")
            if key >= n_inputs:
                raise GraphSchemaError(f"{where}.key: input {key} of {n_inputs} forward arguments")
            if node.get("stride") is not None:
                _ints(node["stride"], f"{where}.stride", minimum=0)
        else:
            _text(node.get("key"), f"{where}.key", STATE_KEY)
            if "stride" in node:
                raise GraphSchemaError(f"{where}.stride: only an input has strides")
    elif form == "constant":
        value = node.get("value")
        if not _number(value):
            raise GraphSchemaError(f"{where}.value: a number expected, got {_show(value)}")
    elif form == "call":
        if not isinstance(node.get("args"), list):
            raise GraphSchemaError(f"{where}.args: a list expected")
        _value(node["args"], f"{where}.args", seen, 0)
        kwargs = node.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise GraphSchemaError(f"{where}.kwargs: an object expected")
        for key, value in kwargs.items():
            _text(key, f"{where}.kwargs key", IDENT)
            _value(value, f"{where}.kwargs.{key}", seen, 0)


def _op_form(op: Any, where: str) -> str:
    if not isinstance(op, str) or len(op) > MAX_TEXT:
        raise GraphSchemaError(f"{where}: an op name expected, got {_show(op)}")
    if op in ("placeholder", "constant"):
        return op
    if op == "<built-in function getitem>":
        return "call"
    if OTHER.fullmatch(op):
        return "other"
    m = ATEN.fullmatch(op)
    if m and not m.group(2).startswith("__") and _registered(*m.groups()):
        return "call"
    raise GraphSchemaError(f"{where}: {_show(op)} is not an ATen or prims op that torch knows "
                           f"(nor one of {', '.join(FIXED_OPS)}, kind:identifier)")


def _registered(namespace: str, packet: str, overload: str) -> bool:
    """Whether torch's op registry has namespace::packet.overload (looked up by name only)."""
    import torch

    try:
        found = getattr(getattr(torch.ops, namespace), packet)
    except (AttributeError, RuntimeError):
        return False
    return isinstance(found, torch._ops.OpOverloadPacket) and overload in found.overloads()


def _meta(node: dict[str, Any], where: str) -> None:
    shape, dtype = node.get("shape"), node.get("dtype")
    if shape is not None:
        _ints(shape, f"{where}.shape", minimum=0)
    if dtype is not None:
        _dtype(dtype, f"{where}.dtype")
    items = node.get("items")
    if items is None:
        return
    if not isinstance(items, list) or len(items) > MAX_NODES:
        raise GraphSchemaError(f"{where}.items: a list expected")
    for i, item in enumerate(items):
        if item is None:
            continue
        if not isinstance(item, dict) or set(item) != {"shape", "dtype"}:
            raise GraphSchemaError(f"{where}.items[{i}]: an object with shape and dtype expected")
        _ints(item["shape"], f"{where}.items[{i}].shape", minimum=0)
        _dtype(item["dtype"], f"{where}.items[{i}].dtype")


def _dtype(value: Any, where: str) -> None:
    import torch

    text = _text(value, where, WORD)
    if not text.startswith("torch.") or not isinstance(getattr(torch, text[6:], None), torch.dtype):
        raise GraphSchemaError(f"{where}: {_show(value)} is not a torch dtype")


def _value(value: Any, where: str, seen: set[str], depth: int) -> None:
    """An argument: a number, a bool, None, a short word, {"ref": earlier node}, {"const": word},
    or a list of those."""
    if value is None or isinstance(value, bool) or _number(value):
        return
    if isinstance(value, str):
        _text(value, where, WORD)
        return
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise GraphSchemaError(f"{where}: lists nested deeper than {MAX_DEPTH}")
        for i, item in enumerate(value):
            _value(item, f"{where}[{i}]", seen, depth + 1)
        return
    if isinstance(value, dict) and set(value) == {"ref"}:
        ref = _text(value["ref"], f"{where}.ref", IDENT)
        if ref not in seen:
            raise GraphSchemaError(f"{where}.ref: {ref!r} names no earlier node")
        return
    if isinstance(value, dict) and set(value) == {"const"}:
        _text(value["const"], f"{where}.const", WORD)
        return
    raise GraphSchemaError(f"{where}: {_show(value)} is not an argument value")


def _text(value: Any, where: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or not pattern.fullmatch(value):
        raise GraphSchemaError(f"{where}: {_show(value)} is not a valid name here "
                               f"(expected {pattern.pattern}, at most {MAX_TEXT} characters)")
    return value


def _number(value: Any) -> bool:
    """An int or a float (NaN and infinities included: constants may be); never a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (
        isinstance(value, float) or abs(value) < 2**63)


def _count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise GraphSchemaError(f"{where}: a non-negative integer expected, got {_show(value)}")
    return value


def _ints(value: Any, where: str, minimum: int | None = None) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_RANK:
        raise GraphSchemaError(f"{where}: a list of at most {MAX_RANK} integers expected, got {_show(value)}")
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or abs(v) >= 2**62 or (minimum is not None and v < minimum):
            raise GraphSchemaError(f"{where}: a list of integers expected, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    """A value for a message: repr, cut short (it came from outside)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
