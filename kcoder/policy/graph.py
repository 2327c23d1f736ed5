"""The captured graph in the planner's terms: sources, pointwise ops, reductions, views and
library calls, with the composite reductions (mean, var, max.dim ...) rewritten into the few
reductions the templates know (sum, prod, max, min, argmax, argmin) plus pointwise ops,
pooling rewritten as a window view (unfold) reduced over its window dims, and cumsum/cumprod as
scan nodes (with the reverse and exclusive forms recognized: see `_scan_family`).

Every op the policy cannot lower stays a node of kind "unsupported"; `census` counts them by
ATen name so that the report can say exactly what is missing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kcoder.policy.ops import POINTWISE

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
        return [a.name for a in _flat(self.args) if isinstance(a, Ref)]


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


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [value]


def _conv(value: Any) -> Any:
    if isinstance(value, dict) and "ref" in value:
        return Ref(value["ref"])
    if isinstance(value, dict) and "const" in value:
        return value["const"]
    if isinstance(value, list):
        return [_conv(v) for v in value]
    return value


def load_graph(data: dict[str, Any]) -> Graph:
    """Normalize capture.py's JSON into a Graph."""
    g = Graph({}, [_conv(o) for o in data["outputs"]], data.get("n_forward_args", 0))
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
    args, kwargs = _conv(item.get("args", [])), _conv(item.get("kwargs", {}))
    base = dict(name=name, shape=shape, dtype=dtype, aten=op)
    if op == "placeholder":
        return [Node(kind="source", op=item["role"], args=[], attrs={"key": item["key"]}, **base)]
    if op == "<built-in function getitem>":
        return _getitem(item, raw, g)
    packet, overload = _packet(op)
    if packet in POOLS:
        return _pool(packet, args, kwargs, base, g)
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
        return [_scan_family(packet, args, base, g)]
    if packet in VIEWS:
        return [Node(kind="view", op=packet, args=args, attrs=kwargs, **base)]
    if packet in LIBRARY:
        return [Node(kind="lib", op=packet, args=args, attrs={"needs": LIBRARY[packet]}, **base)]
    if packet in ("scalar_tensor", "full", "full_like"):
        value = args[0] if packet == "scalar_tensor" else args[1]
        return [Node(kind="pw", op="const", args=[value], **base)]
    if packet in ("_to_copy", "convert_element_type", "clone"):
        return [Node(kind="pw", op="cast", args=args[:1], **base)]
    if packet in POINTWISE:
        return [Node(kind="pw", op=packet, args=args, attrs=kwargs, **base)]
    return [Node(kind="unsupported", op=packet, args=args, **base)]


def _in_shape(g: Graph, arg: Any) -> tuple[int, ...]:
    return g.nodes[arg.name].shape


def _reduce_node(name: str, kind: str, x: Ref, dims: list[int], keepdim: bool, g: Graph,
                 aten: str, dtype: str = "torch.float32") -> Node:
    xs = _in_shape(g, x)
    shape = tuple(1 if i in dims else s for i, s in enumerate(xs)) if keepdim else tuple(
        s for i, s in enumerate(xs) if i not in dims)
    if kind in ("argmax", "argmin"):
        dtype = "torch.int64"
    elif kind in ("sum", "prod") and g.nodes[x.name].dtype in ("torch.int64", "torch.bool", "torch.int32"):
        dtype = "torch.int64"
    return Node(name, "reduce", kind, [x], shape, dtype, {"dims": dims, "keepdim": keepdim}, aten)


def _scaled(name: str, r: Node, scale: float, aten: str) -> list[Node]:
    """r * scale as a pointwise node named `name` (mean = sum / n, var = sum of squares / (n - c))."""
    inner = Node(f"{name}__sum", r.kind, r.op, r.args, r.shape, r.dtype, r.attrs, aten)
    return [inner, Node(name, "pw", "mul", [Ref(inner.name), scale], r.shape, r.dtype, {}, aten)]


def _count(xs: tuple[int, ...], dims: list[int]) -> int:
    return math.prod(xs[d] for d in dims) if xs else 1


def _mean(name: str, x: Ref, dims: list[int], keepdim: bool, g: Graph, aten: str) -> list[Node]:
    n = _count(_in_shape(g, x), dims)
    return _scaled(name, _reduce_node(name, "sum", x, dims, keepdim, g, aten), 1.0 / max(n, 1), aten)


def _var(name: str, x: Ref, dims: list[int], correction: float, keepdim: bool, g: Graph,
         aten: str) -> list[Node]:
    """var = sum((x - mean(x))^2) / (n - correction): a two-stage row reduction."""
    xs = _in_shape(g, x)
    mean = _mean(f"{name}__mean", x, dims, True, g, aten)
    for node in mean:
        g.nodes[node.name] = node
    diff = Node(f"{name}__diff", "pw", "sub", [x, Ref(mean[-1].name)], xs, "torch.float32", {}, aten)
    sq = Node(f"{name}__sq", "pw", "mul", [Ref(diff.name), Ref(diff.name)], xs, "torch.float32", {}, aten)
    g.nodes[diff.name], g.nodes[sq.name] = diff, sq
    n = _count(xs, dims) - correction
    red = _reduce_node(name, "sum", Ref(sq.name), dims, keepdim, g, aten)
    return mean + [diff, sq, *_scaled(name, red, 1.0 / n if n > 0 else math.inf, aten)]


def _reduction(packet: str, overload: str, args: list[Any], kwargs: dict[str, Any],
               base: dict[str, Any], g: Graph) -> list[Node] | None:
    name, aten = base["name"], base["aten"]
    if packet not in ("sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "max", "min", "var",
                      "var_mean") or not args or not isinstance(args[0], Ref):
        return None
    if packet in ("max", "min") and overload not in ("default", "dim"):
        return None  # max.other etc.: pointwise (maximum), in the table
    x, rank = args[0], len(_in_shape(g, args[0]))
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
    return [_reduce_node(name, kind, x, dims, keepdim, g, aten)]


def _gather(name: str, args: list[Any], g: Graph, aten: str) -> list[Node]:
    """gather(x, d, index) with one index per row along d (cross-entropy's pick of the target's
    log-probability): sum over d of where(position == index, x, 0), a row reduction."""
    x, dim, index = args[0], args[1], args[2]
    xs, idx_shape = _in_shape(g, x), _in_shape(g, index)
    dim %= len(xs)
    if len(idx_shape) != len(xs) or idx_shape[dim] != 1:
        return [Node(name, "unsupported", "gather", args, idx_shape, "torch.float32", {}, aten)]
    pos = Node(f"{name}__pos", "pw", "iota", [], xs, "torch.int64", {"dim": dim}, aten)
    hit = Node(f"{name}__hit", "pw", "eq", [Ref(pos.name), index], xs, "torch.bool", {}, aten)
    pick = Node(f"{name}__pick", "pw", "where", [Ref(hit.name), x, 0.0], xs, g.nodes[x.name].dtype, {}, aten)
    for node in (pos, hit, pick):
        g.nodes[node.name] = node
    return [_reduce_node(name, "sum", Ref(pick.name), [dim], True, g, aten, g.nodes[x.name].dtype)]


def _getitem(item: dict[str, Any], raw: dict[str, Any], g: Graph) -> list[Node]:
    src_ref, index = _conv(item["args"])
    src = g.nodes.get(src_ref.name)
    name, aten = item["name"], raw[src_ref.name]["op"] if src_ref.name in raw else "getitem"
    if src is not None and src.kind == "unsupported":  # counted once, by the op itself
        return [Node(name, "view", "alias", [src_ref], tuple(item.get("shape") or ()),
                     item.get("dtype") or "", {}, src.aten)]
    if src is None or src.kind != "tuple":
        return [Node(name, "unsupported", "getitem", [src_ref], tuple(item.get("shape") or ()),
                     item.get("dtype") or "", {}, aten)]
    if src.op == "max_pool":
        return _max_pool_item(name, src, index, g)
    x, dims, keep = src.args[0], src.attrs["dims"], src.attrs["keepdim"]
    if src.op == "var_mean":
        corr = 1 if src.attrs["correction"] is None else src.attrs["correction"]
        return (_var(name, x, dims, corr, keep, g, aten) if index == 0
                else _mean(name, x, dims, keep, g, aten))
    kind = src.op if index == 0 else "arg" + src.op
    return [_reduce_node(name, kind, x, dims, keep, g, aten)]


# --- pooling -------------------------------------------------------------------------------
# Without padding, every pooling window is a strided view of the input: x.unfold(d, span, stride)
# per spatial dim d (dilation: every dil-th element of a span of (k - 1) * dil + 1), so that
# max/avg pooling is a max/mean over the trailing window dims, which the planner lowers as a
# row reduction. Any stride works (overlapping windows are views too) and floor mode's dropped
# remainder is simply never read. Padding (and ceil_mode adding a partial window) would need
# reads outside the input: those stay unsupported, named with the reason.

POOLS = {"max_pool2d_with_indices": "max", "max_pool3d_with_indices": "max", "avg_pool2d": "avg",
         "avg_pool3d": "avg"}
_POOL_ARGS = {"max": ("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
              "avg": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")}


def _per_dim(value: Any, nd: int, default: int) -> list[int]:
    if value is None or value == []:
        return [default] * nd
    value = value if isinstance(value, list) else [value]
    return value * nd if len(value) == 1 else list(value)


def _pool_spec(kind: str, args: list[Any], kwargs: dict[str, Any], xs: tuple[int, ...],
               nd: int) -> tuple[dict[str, Any], str]:
    """Kernel, stride and dilation per spatial dim, or a reason the pooling is not lowered."""
    a = dict(zip(_POOL_ARGS[kind], args[1:], strict=False)) | kwargs
    k = _per_dim(a["kernel_size"], nd, 1)
    spec = {"kernel": k, "stride": _per_dim(a.get("stride"), nd, 0), "dilation": _per_dim(a.get("dilation"), nd, 1),
            "divisor": a.get("divisor_override")}
    spec["stride"] = [s or kk for s, kk in zip(spec["stride"], k, strict=True)]
    if any(_per_dim(a.get("padding"), nd, 0)):
        return spec, "padding"
    spans = [(kk - 1) * d + 1 for kk, d in zip(k, spec["dilation"], strict=True)]
    sizes = xs[len(xs) - nd:]
    if any(n < span for n, span in zip(sizes, spans, strict=True)):
        return spec, "window larger than the input"
    if a.get("ceil_mode") and any((n - span) % s for n, span, s in zip(sizes, spans, spec["stride"], strict=True)):
        return spec, "ceil_mode"  # a last, partial window: reads past the end
    return spec, ""


def _pool(packet: str, args: list[Any], kwargs: dict[str, Any], base: dict[str, Any], g: Graph) -> list[Node]:
    kind, nd = POOLS[packet], 3 if "3d" in packet else 2
    name, aten = base["name"], base["aten"]
    x = args[0]
    spec, why = _pool_spec(kind, args, kwargs, _in_shape(g, x), nd)
    if why:
        return [Node(kind="unsupported", op=packet, args=args, **{**base, "aten": f"{aten} ({why})"})]
    if kind == "max":  # a tuple (values, indices): getitem picks, as for max.dim
        return [Node(name, "tuple", "max_pool", args, (), "", spec, aten)]
    windows = _windowed(x, spec, g, name, aten)
    dims = list(range(len(_in_shape(g, windows)) - nd, len(_in_shape(g, windows))))
    red = _reduce_node(name, "sum", windows, dims, False, g, aten)
    return _scaled(name, red, 1.0 / (spec["divisor"] or math.prod(spec["kernel"])), aten)


def _max_pool_item(name: str, src: Node, index: int, g: Graph) -> list[Node]:
    if index != 0:  # the argmax's position in the input: not lowered
        return [Node(name, "unsupported", "max_pool", src.args, (), "torch.int64", {}, f"{src.aten} (indices)")]
    windows = _windowed(src.args[0], src.attrs, g, name, src.aten)
    rank = len(_in_shape(g, windows))
    return [_reduce_node(name, "max", windows, list(range(rank - len(src.attrs["kernel"]), rank)), False, g, src.aten)]


def _window_views(x: Ref, spec: dict[str, Any], shape: tuple[int, ...], g: Graph, prefix: str,
                  aten: str) -> Ref:
    """x (broadcast to `shape`) as (..., out_1 .. out_nd, k_1 .. k_nd): unfold views."""
    dtype, nd = g.nodes[x.name].dtype, len(spec["kernel"])
    nodes = []
    if g.nodes[x.name].shape != shape:
        nodes.append(Node(f"{prefix}_x", "view", "expand", [x, list(shape)], shape, dtype, {}, aten))
    for i, (k, s, dil) in enumerate(zip(spec["kernel"], spec["stride"], spec["dilation"], strict=True)):
        cur, src = (nodes[-1].shape, Ref(nodes[-1].name)) if nodes else (shape, x)
        dim, span = len(shape) - nd + i, (k - 1) * dil + 1
        new = cur[:dim] + ((cur[dim] - span) // s + 1,) + cur[dim + 1:] + (span,)
        nodes.append(Node(f"{prefix}_u{i}", "view", "unfold", [src, dim, span, s], new, dtype, {}, aten))
        if dil > 1:  # every dil-th element of the span
            nodes.append(Node(f"{prefix}_d{i}", "view", "slice", [Ref(nodes[-1].name), len(new) - 1, 0, None, dil],
                              new[:-1] + (k,), dtype, {}, aten))
    for node in nodes:
        g.nodes[node.name] = node
    return Ref(nodes[-1].name)


def _windowed(x: Ref, spec: dict[str, Any], g: Graph, name: str, aten: str) -> Ref:
    """The pooling windows of x. The pointwise DAG that computes x is rebuilt over the windows
    (its leaves read through window views), so that the pooling kernel computes it inline
    instead of a kernel of its own writing x to memory: a view of a computed value is not free.
    Only where windows do not overlap: else each element would be computed once per window
    holding it (up to k^3 times), where reading it back from memory is cheaper."""
    shape, memo = _in_shape(g, x), {}
    if any(s < (k - 1) * d + 1 for k, s, d in zip(spec["kernel"], spec["stride"], spec["dilation"], strict=True)):
        return _window_views(x, spec, shape, g, f"{name}__w", aten)

    def visit(ref: Ref) -> Ref:
        if ref.name in memo:
            return memo[ref.name]
        node = g.nodes[ref.name]
        if node.kind != "pw" or node.op == "iota" or node.shape != shape:  # a leaf: a view of it
            memo[ref.name] = _window_views(ref, spec, shape, g, f"{name}__w{len(memo)}", aten)
            return memo[ref.name]
        args = [visit(a) if isinstance(a, Ref) else a for a in node.args]
        copy = Node(f"{name}__w{len(memo)}_{node.name}", "pw", node.op, args, _window_shape(shape, spec),
                    node.dtype, node.attrs, node.aten)
        g.nodes[copy.name] = copy
        memo[ref.name] = Ref(copy.name)
        return memo[ref.name]
    return visit(x)


def _window_shape(shape: tuple[int, ...], spec: dict[str, Any]) -> tuple[int, ...]:
    nd = len(spec["kernel"])
    outs = tuple((n - (k - 1) * dil - 1) // s + 1 for n, k, s, dil in zip(
        shape[len(shape) - nd:], spec["kernel"], spec["stride"], spec["dilation"], strict=True))
    return tuple(shape[:len(shape) - nd]) + outs + tuple(spec["kernel"])


# --- scans ---------------------------------------------------------------------------------
# cumsum/cumprod along one dim become a node of kind "scan" (op sum or prod, attrs dim, reverse,
# exclusive). Two spellings of variants are recognized because they are whole patterns, not
# ops the planner could lower one by one: flip(d) -> scan along d -> flip(d) is the scan run
# from the row's end (torch has no negative strides, so the flips cannot be views), and
# cat((identity of size 1 along d, scan(x[..., :n-1]) along d), d) is the exclusive scan of x
# (the prefix before each position). Any other flip or cat stays unsupported, named.

def _scan_family(packet: str, args: list[Any], base: dict[str, Any], g: Graph) -> Node:
    node = {"cumsum": _scan, "cumprod": _scan, "flip": _reverse_scan, "cat": _exclusive_scan}[packet](
        packet, args, base, g)
    return node or Node(kind="unsupported", op=packet, args=args, **base)


def _scan(packet: str, args: list[Any], base: dict[str, Any], g: Graph) -> Node | None:
    if not isinstance(args[0], Ref) or not _in_shape(g, args[0]):
        return None
    if base["dtype"] != "torch.float32":  # int64 accumulation (cumsum of int or bool): not lowered
        return Node(kind="unsupported", op=packet, args=args,
                    **{**base, "aten": f"{base['aten']} ({base['dtype']} output)"})
    attrs = {"dim": args[1] % len(_in_shape(g, args[0])), "reverse": False, "exclusive": False}
    return Node(kind="scan", op=packet[3:], args=[args[0]], attrs=attrs, **base)


def _reverse_scan(packet: str, args: list[Any], base: dict[str, Any], g: Graph) -> Node | None:
    """flip(scan(flip(x, [d])), [d]) -> the scan of x from the row's end."""
    scan = g.nodes.get(args[0].name) if isinstance(args[0], Ref) else None
    if scan is None or scan.kind != "scan" or not _flips_only(args[1], scan.attrs["dim"], len(scan.shape)):
        return None
    inner = g.nodes[scan.args[0].name]
    if inner.op != "flip" or not _flips_only(inner.args[1], scan.attrs["dim"], len(scan.shape)):
        return None
    attrs = {**scan.attrs, "reverse": not scan.attrs["reverse"]}
    return Node(kind="scan", op=scan.op, args=[inner.args[0]], attrs=attrs, **base)


def _flips_only(dims: Any, dim: int, rank: int) -> bool:
    return isinstance(dims, list) and [d % rank for d in dims] == [dim]


def _exclusive_scan(packet: str, args: list[Any], base: dict[str, Any], g: Graph) -> Node | None:
    """cat((identity with size 1 along d, scan(x[:n-1] along d)), d) -> the exclusive scan of x."""
    parts, shape = args[0], base["shape"]
    if len(parts) != 2 or not all(isinstance(a, Ref) for a in parts) or not shape:
        return None
    dim = (args[1] if len(args) > 1 else 0) % len(shape)
    head, scan = g.nodes[parts[0].name], g.nodes[parts[1].name]
    if scan.kind != "scan" or scan.attrs["dim"] != dim or scan.attrs["exclusive"] or scan.attrs["reverse"]:
        return None
    identity = 1.0 if scan.op == "prod" else 0.0
    if head.op != "const" or head.args[0] != identity or _pad(head.shape, len(shape)) != _one_along(shape, dim):
        return None
    body = g.nodes[scan.args[0].name]
    if body.op != "slice" or not _drops_last(body, dim, shape, g):
        return None
    return Node(kind="scan", op=scan.op, args=[body.args[0]], attrs={**scan.attrs, "exclusive": True}, **base)


def _one_along(shape: tuple[int, ...], dim: int) -> tuple[int, ...]:
    return tuple(1 if i == dim else s for i, s in enumerate(shape))


def _pad(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _drops_last(node: Node, dim: int, shape: tuple[int, ...], g: Graph) -> bool:
    """`node` is x[..., 0:n-1] along dim (step 1) of an x of `shape`."""
    x, n = node.args[0], shape[dim]
    d, start, end, step = (node.args + [0, None, None, 1])[1:5]
    if not isinstance(x, Ref) or _in_shape(g, x) != shape or d % len(shape) != dim:
        return False
    end = n if end is None else (end + n if end < 0 else min(end, n))
    return (start or 0) == 0 and end == n - 1 and (step or 1) == 1
