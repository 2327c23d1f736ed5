"""cumsum/cumprod as scan nodes, with KernelBench's reverse (flip, scan, flip) and exclusive
(cat of the identity and the scan of x without its last element) spellings recognized as
reverse and exclusive scans of x; every other flip or cat stays unsupported."""

from __future__ import annotations

from typing import Any

from kcoder.policy.nodes import Graph, Node, Ref, in_shape, pad_shape


def scan_family(packet: str, args: list[Any], base: dict[str, Any], g: Graph) -> Node:
    node = {"cumsum": _scan, "cumprod": _scan, "flip": _reverse_scan, "cat": _exclusive_scan}[packet](
        packet, args, base, g)
    return node or Node(kind="unsupported", op=packet, args=args, **base)


def _scan(packet: str, args: list[Any], base: dict[str, Any], g: Graph) -> Node | None:
    if not isinstance(args[0], Ref) or not in_shape(g, args[0]):
        return None
    if base["dtype"] != "torch.float32":  # int64 accumulation (cumsum of int or bool): not lowered
        return Node(kind="unsupported", op=packet, args=args,
                    **{**base, "aten": f"{base['aten']} ({base['dtype']} output)"})
    attrs = {"dim": args[1] % len(in_shape(g, args[0])), "reverse": False, "exclusive": False}
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
    if head.op != "const" or head.args[0] != identity or pad_shape(head.shape, len(shape)) != _one_along(shape, dim):
        return None
    body = g.nodes[scan.args[0].name]
    if body.op != "slice" or not _drops_last(body, dim, shape, g):
        return None
    return Node(kind="scan", op=scan.op, args=[body.args[0]], attrs={**scan.attrs, "exclusive": True}, **base)


def _one_along(shape: tuple[int, ...], dim: int) -> tuple[int, ...]:
    return tuple(1 if i == dim else s for i, s in enumerate(shape))


def _drops_last(node: Node, dim: int, shape: tuple[int, ...], g: Graph) -> bool:
    """`node` is x[..., 0:n-1] along dim (step 1) of an x of `shape`."""
    x, n = node.args[0], shape[dim]
    d, start, end, step = (node.args + [0, None, None, 1])[1:5]
    if not isinstance(x, Ref) or in_shape(g, x) != shape or d % len(shape) != dim:
        return False
    end = n if end is None else (end + n if end < 0 else min(end, n))
    return (start or 0) == 0 and end == n - 1 and (step or 1) == 1
