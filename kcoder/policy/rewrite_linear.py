"""A sum over the output of a linear map is a linear map of summed weights.

GEMM: sum_j (A @ B)[i, j] = sum_k A[i, k] * (sum_j B[k, j]), so a sum (or mean) over the output
features of x @ W^T is a GEMV with W summed over its rows: the (b x K x n) GEMM becomes a
column sum of W (K x n reads) and a (b x K) dot product, both row reductions the policy's own
kernels do (no library call left). KernelBench level 2's 14_Gemm_Divide_Sum_Scaling and
18_Matmul_Sum_... are this.

Transposed convolution without padding: every input element times every tap lands inside the
output (nothing is cropped), so the sum over all output positions of channel o is
sum_c (sum over positions of x[c]) * (sum over taps of W[c, o]) + bias[o] * (output positions):
a global average pool after a ConvTranspose becomes a spatial sum of the input and a
(b x C_in x C_out) contraction (42_ConvTranspose2d_GlobalAvgPool_...).

Between the linear map and the sum, an affine chain is carried through the sum: a scale or a
division by a number or by a tensor constant along the summed dims, a negation, and adding or
subtracting a term (a bias, another tensor: its own sum over those dims is added, n * t where it
is constant along them). Every value of the chain must have no other reader (else the GEMM is
needed anyway) and the shape of the map's output (no broadcast to a larger shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kcoder.policy.nodes import Graph, Node, Ref, reduce_node
from kcoder.policy.rewrite_util import F32, Users, fresh, is_number, replace_with

_AFFINE = ("mul", "div", "add", "sub", "neg")


@dataclass
class Step:
    """One op of the chain: `node`, the position of the chain's value in its args, and the
    other operand (a number or a Ref; None for neg)."""

    node: Node
    pos: int
    other: Any


def _pad(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _steps(g: Graph, node: Node, users: Users) -> list[Step]:
    """`node` as an affine op on an operand that only it reads: each way to read it so (x + y
    may continue through x or through y)."""
    if node.kind != "pw" or node.op not in _AFFINE or node.dtype != F32 or node.attrs.get("rounding_mode") \
            or node.attrs.get("alpha", 1) != 1 or len(node.args) != (1 if node.op == "neg" else 2):
        return []
    if node.op == "neg":
        return [Step(node, 0, None)] if isinstance(node.args[0], Ref) else []
    found = []
    for pos in [0] if node.op == "div" else [0, 1]:
        arg, other = node.args[pos], node.args[1 - pos]
        if not (isinstance(arg, Ref) and users[arg.name] == [node.name] and arg != other):
            continue
        if is_number(other) or (isinstance(other, Ref) and g.nodes[other.name].dtype == F32):
            found.append(Step(node, pos, other))
    return found


def _chain(g: Graph, start: Ref, users: Users, op: str) -> tuple[Node, list[Step]] | None:
    """From the reduction's input down to a library node `op`: (that node, the steps bottom-up)."""
    node = g.nodes[start.name]
    if node.kind == "lib":
        return (node, []) if node.op == op else None
    for step in _steps(g, node, users):
        found = _chain(g, node.args[step.pos], users, op)
        if found is not None:
            return found[0], found[1] + [step]
    return None


class _Builder:
    """New nodes for one rewrite, added to the graph as they are made (reduce_node reads its
    input's shape from the graph); `replace_with` then moves them before the reduction."""

    def __init__(self, g: Graph, red: Node) -> None:
        self.g, self.red, self.made = g, red, []

    def add(self, node: Node) -> Ref:
        self.g.nodes[node.name] = node
        self.made.append(node)
        return Ref(node.name)

    def name(self, what: str) -> str:
        return fresh(self.g, f"{self.red.name}__{what}")

    def reduce(self, what: str, x: Ref, dims: list[int], keepdim: bool) -> Ref:
        return self.add(reduce_node(self.name(what), "sum", x, dims, keepdim, self.g, self.red.aten))

    def pw(self, what: str, op: str, args: list[Any], shape: tuple[int, ...], attrs: dict | None = None) -> Ref:
        return self.add(Node(self.name(what), "pw", op, args, tuple(shape), F32, dict(attrs or {}), self.red.aten))

    def reshape(self, what: str, x: Ref, shape: tuple[int, ...]) -> Ref:
        return self.add(Node(self.name(what), "view", "reshape", [x, list(shape)], tuple(shape), F32, {},
                             self.red.aten))


def _term_sum(b: _Builder, t: Any, out: tuple[int, ...], dims: list[int]) -> Any:
    """sum over `dims` of term t broadcast to `out` (keepdim form, t's own rank)."""
    count = math.prod(out[d] for d in dims)
    if is_number(t):
        return float(t) * count
    shape = b.g.nodes[t.name].shape
    off = len(out) - len(shape)
    own = [d - off for d in dims if d >= off and shape[d - off] > 1]
    spread = math.prod(out[d] for d in dims if d < off or shape[d - off] == 1)
    if own:
        t = b.reduce("term", t, own, True)
    if spread > 1:
        kept = b.g.nodes[t.name].shape
        t = b.pw("spread", "mul", [t, float(spread)], kept)
    return t


def _carry(b: _Builder, s: Ref, steps: list[Step], out: tuple[int, ...], dims: list[int]) -> Ref | None:
    """The chain applied to s, the sum over dims of the map's output (keepdim form)."""
    kept = tuple(1 if d in dims else n for d, n in enumerate(out))
    for step in steps:
        node, other = step.node, step.other
        if node.shape != out:
            return None
        if node.op == "neg":
            s = b.pw("neg", "neg", [s], kept)
            continue
        if node.op in ("mul", "div"):
            if isinstance(other, Ref) and any(_pad(b.g.nodes[other.name].shape, len(out))[d] != 1 for d in dims):
                return None  # not constant along the summed dims: not a factor of the sum
            term = other
        else:
            term = _term_sum(b, other, out, dims)
        args = [s, term] if step.pos == 0 else [term, s]
        s = b.pw(node.op, node.op, args, kept, node.attrs)
    return s


def _finish(g: Graph, b: _Builder, s: Ref, red: Node) -> bool:
    if not red.attrs["keepdim"]:
        s = b.reshape("squeeze", s, red.shape)
    replace_with(g, red.name, b.made)
    return True


def _summed(red: Node, g: Graph, users: Users, op: str) -> tuple[Node, list[Step]] | None:
    """A float32 sum whose input is an affine chain, read by nothing else, of a library `op`."""
    if red.kind != "reduce" or red.op != "sum" or red.dtype != F32 or users[red.args[0].name] != [red.name]:
        return None
    found = _chain(g, red.args[0], users, op)
    if found is None or users[found[0].name] != [found[1][0].node.name if found[1] else red.name]:
        return None
    return found


def gemm_sum(g: Graph, red: Node, users: Users) -> bool:
    """sum over the last dim of (affine chain of) A @ B -> A @ (B @ 1): two GEMVs. Under --allow
    gemm both are library calls (a GEMV at the memory's speed, whatever the layout of B); without
    it, the policy's own reductions: a sum of B over its columns, then a dot product per row."""
    found = _summed(red, g, users, "mm")
    if found is None:
        return False
    mm, steps = found
    a, w = mm.args[:2]
    if red.attrs["dims"] != [1] or len(mm.shape) != 2 or not all(
            isinstance(r, Ref) and g.nodes[r.name].dtype == F32 for r in (a, w)):
        return False
    b = _Builder(g, red)
    k, n = g.nodes[w.name].shape
    if "gemm" in users.allow:
        ones = b.add(Node(b.name("ones"), "pw", "const", [1.0], (n, 1), F32, {}, red.aten))
        wsum = b.add(Node(b.name("wsum"), "lib", "mm", [w, ones], (k, 1), F32, {"needs": "gemm"}, red.aten))
        s0 = b.add(Node(b.name("gemv"), "lib", "mm", [a, wsum], (mm.shape[0], 1), F32, {"needs": "gemm"}, red.aten))
    else:
        wsum = b.reduce("wsum", w, [1], False)  # (K,)
        prod = b.pw("gemv", "mul", [a, wsum], g.nodes[a.name].shape)
        s0 = b.reduce("dot", prod, [1], True)
    s = _carry(b, s0, steps, mm.shape, [1])
    if s is None:
        _undo(g, b)
        return False
    return _finish(g, b, s, red)


def conv_transpose_sum(g: Graph, red: Node, users: Users) -> bool:
    """sum over every spatial dim of (affine chain of) conv_transpose(x, W, bias) without padding
    -> sum_c xsum[:, c] * wsum[c, :] + bias * positions."""
    found = _summed(red, g, users, "convolution")
    if found is None:
        return False
    conv, steps = found
    x, w, bias, _stride, padding, _dilation, transposed, _out_pad, groups = conv.args[:9]
    rank = len(conv.shape)
    spatial = list(range(2, rank))
    if not transposed or groups != 1 or any(p != 0 for p in padding) or red.attrs["dims"] != spatial or \
            not all(isinstance(r, Ref) and g.nodes[r.name].dtype == F32 for r in (x, w)) or \
            not (bias is None or (isinstance(bias, Ref) and g.nodes[bias.name].dtype == F32)):
        return False
    n, c_in = g.nodes[x.name].shape[:2]
    c_out = conv.shape[1]
    b = _Builder(g, red)
    xsum = b.reshape("xcol", b.reduce("xsum", x, list(range(2, len(g.nodes[x.name].shape))), False), (n, c_in, 1))
    wsum = b.reduce("wsum", w, list(range(2, len(g.nodes[w.name].shape))), False)  # (C_in, C_out)
    prod = b.pw("outer", "mul", [xsum, wsum], (n, c_in, c_out))
    s = b.reduce("contract", prod, [1], False)  # (N, C_out)
    if bias is not None:
        positions = math.prod(conv.shape[2:])
        s = b.pw("bias", "add", [s, b.pw("bias_sum", "mul", [bias, float(positions)], (c_out,))], (n, c_out))
    s = _carry(b, b.reshape("keep", s, (n, c_out) + (1,) * len(spatial)), steps, conv.shape, spatial)
    if s is None:
        _undo(g, b)
        return False
    return _finish(g, b, s, red)


def _undo(g: Graph, b: _Builder) -> None:
    for node in b.made:
        g.nodes.pop(node.name, None)
