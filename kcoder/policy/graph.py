"""The captured graph in the planner's terms: sources, pointwise ops, reductions, views and
library calls, with the composite reductions (mean, var, max.dim ...) rewritten into the few
reductions the templates know (sum, prod, max, min, argmax, argmin) plus pointwise ops,
pooling rewritten as a window view (unfold) reduced over its window dims, and cumsum/cumprod as
scan nodes (pooling.py and scans.py do those two).

Every op the policy cannot lower stays a node of kind "unsupported"; `census` counts them by
ATen name so that the report can say exactly what is missing.
"""

from __future__ import annotations

import math
from typing import Any

from kcoder.policy.nodes import (
    DTYPES,
    LIBRARY,
    REDUCE_KINDS,
    VIEWS,
    Graph,
    Node,
    Ref,
    count_over,
    from_json,
    in_shape,
    reduce_node,
    scaled,
)
from kcoder.policy.ops import POINTWISE
from kcoder.policy.pooling import POOLS, max_pool_item, pool_nodes
from kcoder.policy.scans import scan_family

__all__ = ["DTYPES", "LIBRARY", "REDUCE_KINDS", "VIEWS", "Graph", "Node", "Ref", "load_graph"]

def load_graph(data: dict[str, Any]) -> Graph:
    """Normalize capture.py's JSON into a Graph."""
    g = Graph({}, [from_json(o) for o in data["outputs"]], data.get("n_forward_args", 0))
    raw = {n["name"]: n for n in data["nodes"]}
    for item in data["nodes"]:
        for node in _normalize(item, raw, g):
            g.nodes[node.name] = node
    return g


def _packet(op: str) -> tuple[str, str]:
    parts = op.split(".")
    return (parts[1], parts[2] if len(parts) > 2 else "default") if len(parts) >= 2 else (op, "")


def _dims(dims: Any, rank: int) -> list[int]:
    if dims is None or dims == []:
        return list(range(rank))
    dims = dims if isinstance(dims, list) else [dims]
    return sorted({d % rank if rank else 0 for d in dims})


def _normalize(item: dict[str, Any], raw: dict[str, Any], g: Graph) -> list[Node]:
    name, op = item["name"], item["op"]
    shape = tuple(item["shape"]) if item.get("shape") is not None else ()
    dtype = item.get("dtype") or ""
    args, kwargs = from_json(item.get("args", [])), from_json(item.get("kwargs", {}))
    base = dict(name=name, shape=shape, dtype=dtype, aten=op)
    if op == "placeholder":
        attrs = {"key": item["key"], **({"stride": item["stride"]} if item.get("stride") is not None else {})}
        return [Node(kind="source", op=item["role"], args=[], attrs=attrs, **base)]
    if op == "<built-in function getitem>":
        return _getitem(item, raw, g)
    if op == "constant" and (not dtype or dtype in DTYPES):  # a 0-d tensor built in forward
        return [Node(kind="pw", op="const", args=[item["value"]], **base)]
    packet, overload = _packet(op)
    if packet in POOLS:
        return pool_nodes(packet, args, kwargs, base, g)
    if item.get("shape") is None and packet not in ("max", "min", "var_mean"):
        return [Node(kind="unsupported", op=packet, args=args, **base)]
    if dtype and dtype not in DTYPES:
        return [Node(kind="unsupported", op=packet, args=args, aten=f"{op} ({dtype})",
                     **{k: v for k, v in base.items() if k != "aten"})]
    if packet.endswith("_") and not packet.endswith("__") and packet[:-1] in POINTWISE:
        target = args[0]
        if isinstance(target, Ref) and g.nodes[target.name].kind == "source":  # mutates an input
            return [Node(kind="unsupported", op=packet, args=args, **base)]
        packet = packet[:-1]
    reduced = _reduction(packet, overload, args, kwargs, base, g)
    if reduced is not None:
        return reduced
    if packet == "gather" and len(args) >= 3 and isinstance(args[2], Ref):
        return _gather(name, args, g, op)
    if packet in ("cumsum", "cumprod", "flip", "cat"):
        return [scan_family(packet, args, base, g)]
    if packet in VIEWS:
        return [Node(kind="view", op=packet, args=args, attrs=kwargs, **base)]
    if packet in LIBRARY:
        return [Node(kind="lib", op=packet, args=args, attrs={"needs": LIBRARY[packet]}, **base)]
    if packet in ("scalar_tensor", "full", "full_like"):
        value = args[0] if packet == "scalar_tensor" else args[1]
        return [Node(kind="pw", op="const", args=[value], **base)]
    if packet in ("_to_copy", "convert_element_type", "clone", "lift_fresh_copy"):
        return [Node(kind="pw", op="cast", args=args[:1], **base)]
    if packet in POINTWISE:
        return [Node(kind="pw", op=packet, args=args, attrs=kwargs, **base)]
    return [Node(kind="unsupported", op=packet, args=args, **base)]


def _mean(name: str, x: Ref, dims: list[int], keepdim: bool, g: Graph, aten: str) -> list[Node]:
    n = count_over(in_shape(g, x), dims)
    return scaled(name, reduce_node(name, "sum", x, dims, keepdim, g, aten), 1.0 / max(n, 1), aten)


def _var(name: str, x: Ref, dims: list[int], correction: float, keepdim: bool, g: Graph,
         aten: str) -> list[Node]:
    """var = sum((x - mean(x))^2) / (n - correction): a two-stage row reduction."""
    xs = in_shape(g, x)
    mean = _mean(f"{name}__mean", x, dims, True, g, aten)
    for node in mean:
        g.nodes[node.name] = node
    diff = Node(f"{name}__diff", "pw", "sub", [x, Ref(mean[-1].name)], xs, "torch.float32", {}, aten)
    sq = Node(f"{name}__sq", "pw", "mul", [Ref(diff.name), Ref(diff.name)], xs, "torch.float32", {}, aten)
    g.nodes[diff.name], g.nodes[sq.name] = diff, sq
    n = count_over(xs, dims) - correction
    red = reduce_node(name, "sum", Ref(sq.name), dims, keepdim, g, aten)
    return mean + [diff, sq, *scaled(name, red, 1.0 / n if n > 0 else math.inf, aten)]


def _reduction(packet: str, overload: str, args: list[Any], kwargs: dict[str, Any],
               base: dict[str, Any], g: Graph) -> list[Node] | None:
    name, aten = base["name"], base["aten"]
    if packet not in ("sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "max", "min", "var",
                      "var_mean") or not args or not isinstance(args[0], Ref):
        return None
    if packet in ("max", "min") and overload not in ("default", "dim"):
        return None  # max.other etc.: pointwise (maximum), in the table
    x, rank = args[0], len(in_shape(g, args[0]))
    if overload == "default" and packet in ("sum", "mean", "prod", "max", "min"):
        dims, keepdim = list(range(rank)), False
    else:
        dims = _dims(args[1] if len(args) > 1 else kwargs.get("dim"), rank)
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    if packet in ("max", "min", "var_mean") and overload != "default":  # tuples: getitem picks
        return [Node(name, "tuple", packet, args, (), "", {"dims": dims, "keepdim": keepdim,
                                                          "correction": kwargs.get("correction", 1)}, aten)]
    if packet == "var":
        corr = args[2] if aten.startswith("prims.") and len(args) > 2 else kwargs.get("correction", 1)
        return _var(name, x, dims, 1 if corr is None else corr, keepdim, g, aten)
    if packet == "mean":
        return _mean(name, x, dims, keepdim, g, aten)
    kind = {"amax": "max", "amin": "min"}.get(packet, packet)
    return [reduce_node(name, kind, x, dims, keepdim, g, aten)]


def _gather(name: str, args: list[Any], g: Graph, aten: str) -> list[Node]:
    """gather(x, d, index) with one index per row along d (cross-entropy's pick of the target's
    log-probability): sum over d of where(position == index, x, 0), a row reduction."""
    x, dim, index = args[0], args[1], args[2]
    xs, idx_shape = in_shape(g, x), in_shape(g, index)
    dim %= len(xs)
    if len(idx_shape) != len(xs) or idx_shape[dim] != 1:
        return [Node(name, "unsupported", "gather", args, idx_shape, "torch.float32", {}, aten)]
    pos = Node(f"{name}__pos", "pw", "iota", [], xs, "torch.int64", {"dim": dim}, aten)
    hit = Node(f"{name}__hit", "pw", "eq", [Ref(pos.name), index], xs, "torch.bool", {}, aten)
    pick = Node(f"{name}__pick", "pw", "where", [Ref(hit.name), x, 0.0], xs, g.nodes[x.name].dtype, {}, aten)
    for node in (pos, hit, pick):
        g.nodes[node.name] = node
    return [reduce_node(name, "sum", Ref(pick.name), [dim], True, g, aten, g.nodes[x.name].dtype)]


def _getitem(item: dict[str, Any], raw: dict[str, Any], g: Graph) -> list[Node]:
    src_ref, index = from_json(item["args"])
    src = g.nodes.get(src_ref.name)
    name, aten = item["name"], raw[src_ref.name]["op"] if src_ref.name in raw else "getitem"
    if src is not None and src.kind == "unsupported":  # counted once, by the op itself
        return [Node(name, "view", "alias", [src_ref], tuple(item.get("shape") or ()),
                     item.get("dtype") or "", {}, src.aten)]
    if src is None or src.kind != "tuple":
        return [Node(name, "unsupported", "getitem", [src_ref], tuple(item.get("shape") or ()),
                     item.get("dtype") or "", {}, aten)]
    if src.op == "max_pool":
        return max_pool_item(name, src, index, g)
    x, dims, keep = src.args[0], src.attrs["dims"], src.attrs["keepdim"]
    if src.op == "var_mean":
        corr = 1 if src.attrs["correction"] is None else src.attrs["correction"]
        return (_var(name, x, dims, corr, keep, g, aten) if index == 0
                else _mean(name, x, dims, keep, g, aten))
    kind = src.op if index == 0 else "arg" + src.op
    return [reduce_node(name, kind, x, dims, keep, g, aten)]


# --- pooling -------------------------------------------------------------------------------
# Without padding, every pooling window is a strided view of the input: x.unfold(d, span, stride)
# per spatial dim d (dilation: every dil-th element of a span of (k - 1) * dil + 1), so that
# max/avg pooling is a max/mean over the trailing window dims, which the planner lowers as a
# row reduction. Any stride works (overlapping windows are views too) and floor mode's dropped
# remainder is simply never read. Padding (and ceil_mode adding a partial window) would need
# reads outside the input: those stay unsupported, named with the reason.
