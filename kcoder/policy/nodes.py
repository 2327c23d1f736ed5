"""The policy's graph vocabulary: values (Node), references to them (Ref), the Graph, and the
helpers that graph.py, pooling.py and scans.py share to build reduction nodes."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

REDUCE_KINDS = ("sum", "prod", "max", "min", "argmax", "argmin")
DTYPES = {"torch.float32": "float", "torch.int64": "int64_t", "torch.bool": "bool", "torch.int32": "int32_t"}
VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "permute", "t", "transpose",
         "expand", "broadcast_in_dim", "alias", "detach", "slice", "select", "lift_fresh", "unfold"}
LIBRARY = {"mm": "gemm", "bmm": "gemm", "convolution": "conv"}


@dataclass(frozen=True)
class Ref:
    """An argument that is another node's value."""

    name: str


@dataclass
class Node:
    """One value of the graph. kind: source, pw, reduce, view, lib or unsupported."""

    name: str
    kind: str
    op: str
    args: list[Any]
    shape: tuple[int, ...]
    dtype: str
    attrs: dict[str, Any] = field(default_factory=dict)
    aten: str = ""  # the captured op's name, for messages

    def refs(self) -> list[str]:
        return [a.name for a in flat_args(self.args) if isinstance(a, Ref)]


@dataclass
class Graph:
    nodes: dict[str, Node]
    outputs: list[Any]  # Ref or constant, in the order forward returns them
    n_forward_args: int

    def census(self) -> Counter[str]:
        """Unsupported ops on the way to an output, by ATen name."""
        return Counter(self.nodes[n].aten for n in self.needed() if self.nodes[n].kind == "unsupported")

    def needed(self) -> list[str]:
        """Names of the nodes the outputs depend on, in graph order."""
        seen: set[str] = set()
        stack = [o.name for o in self.outputs if isinstance(o, Ref)]
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack.extend(self.nodes[name].refs())
        return [n for n in self.nodes if n in seen]


def flat_args(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flat_args(v)]
    return [value]


def from_json(value: Any) -> Any:
    if isinstance(value, dict) and "ref" in value:
        return Ref(value["ref"])
    if isinstance(value, dict) and "const" in value:
        return value["const"]
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def in_shape(g: Graph, arg: Any) -> tuple[int, ...]:
    return g.nodes[arg.name].shape


def reduce_node(name: str, kind: str, x: Ref, dims: list[int], keepdim: bool, g: Graph,
                 aten: str, dtype: str = "torch.float32") -> Node:
    xs = in_shape(g, x)
    shape = tuple(1 if i in dims else s for i, s in enumerate(xs)) if keepdim else tuple(
        s for i, s in enumerate(xs) if i not in dims)
    if kind in ("argmax", "argmin"):
        dtype = "torch.int64"
    elif kind in ("sum", "prod") and g.nodes[x.name].dtype in ("torch.int64", "torch.bool", "torch.int32"):
        dtype = "torch.int64"
    return Node(name, "reduce", kind, [x], shape, dtype, {"dims": dims, "keepdim": keepdim}, aten)


def scaled(name: str, r: Node, scale: float, aten: str) -> list[Node]:
    """r * scale as a pointwise node named `name` (mean = sum / n, var = sum of squares / (n - c))."""
    inner = Node(f"{name}__sum", r.kind, r.op, r.args, r.shape, r.dtype, r.attrs, aten)
    return [inner, Node(name, "pw", "mul", [Ref(inner.name), scale], r.shape, r.dtype, {}, aten)]


def count_over(xs: tuple[int, ...], dims: list[int]) -> int:
    return math.prod(xs[d] for d in dims) if xs else 1


def pad_shape(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)
