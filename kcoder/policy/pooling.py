"""Pooling as a window view of its input reduced over the window dims.

max_pool/avg_pool (2d, 3d; 1d reaches ATen as 2d) become `unfold` views of the input, one per
pooled dim (a step slice where there is dilation), giving (..., out_1..out_n, k_1..k_n), then a
max, or a sum times 1/k (or 1/divisor_override), over the trailing window dims. Floor mode's
remainder is never read. Where windows do not overlap, the pointwise producer of the pooled
value is rebuilt over the windows (`_windowed`), so it fuses into the reduction's kernel.
Padding, a partial ceil_mode window and used max-pool indices stay unsupported, with the reason.
"""

from __future__ import annotations

import math
from typing import Any

from kcoder.policy.nodes import Graph, Node, Ref, in_shape, reduce_node, scaled

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


def pool_nodes(packet: str, args: list[Any], kwargs: dict[str, Any], base: dict[str, Any], g: Graph) -> list[Node]:
    kind, nd = POOLS[packet], 3 if "3d" in packet else 2
    name, aten = base["name"], base["aten"]
    x = args[0]
    spec, why = _pool_spec(kind, args, kwargs, in_shape(g, x), nd)
    if why:
        return [Node(kind="unsupported", op=packet, args=args, **{**base, "aten": f"{aten} ({why})"})]
    if kind == "max":  # a tuple (values, indices): getitem picks, as for max.dim
        return [Node(name, "tuple", "max_pool", args, (), "", spec, aten)]
    windows = _windowed(x, spec, g, name, aten)
    dims = list(range(len(in_shape(g, windows)) - nd, len(in_shape(g, windows))))
    red = reduce_node(name, "sum", windows, dims, False, g, aten)
    return scaled(name, red, 1.0 / (spec["divisor"] or math.prod(spec["kernel"])), aten)


def max_pool_item(name: str, src: Node, index: int, g: Graph) -> list[Node]:
    if index != 0:  # the argmax's position in the input: not lowered
        return [Node(name, "unsupported", "max_pool", src.args, (), "torch.int64", {}, f"{src.aten} (indices)")]
    windows = _windowed(src.args[0], src.attrs, g, name, src.aten)
    rank = len(in_shape(g, windows))
    return [reduce_node(name, "max", windows, list(range(rank - len(src.attrs["kernel"]), rank)), False, g, src.aten)]


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
    shape, memo = in_shape(g, x), {}
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
