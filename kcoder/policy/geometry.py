"""The shapes and strides each kernel will see, known before any build (the cuda target
renders them as constants, as TorchInductor specializes its kernels to the shapes it saw).

forward only allocates, takes views and calls library ops, so running its body on "meta"
tensors (shapes and strides, no data; interpret.py carries the steps out, never exec) with the
captured input and parameter shapes gives every kernel call's operands exactly as they will
be at run time. The operands' dims are then coalesced the way the kernels index them
(`squash`, the same rule as emit_cpu's GEOM): size-1 dims dropped, neighbours merged where
every operand's strides chain. The binding checks the real operands against the recorded
sizes and strides and names any difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kcoder.policy.batchdims import BATCH, traced_batch
from kcoder.policy.graph import Graph
from kcoder.policy.interpret import run_steps
from kcoder.policy.kernel import Plan


@dataclass
class Geometry:
    """One kernel call's operands: raw sizes/strides/offsets, and the coalesced outer (o*) and
    inner (i*) dims with each operand's strides over them."""

    sizes: tuple[int, ...]
    strides: list[tuple[int, ...]]
    offsets: list[int]
    os: list[int] = field(default_factory=list)
    is_: list[int] = field(default_factory=list)
    ost: list[list[int]] = field(default_factory=list)
    ist: list[list[int]] = field(default_factory=list)

    @property
    def O(self) -> int:  # noqa: E743  (the kernels' name for it)
        return math.prod(self.os)

    @property
    def L(self) -> int:  # noqa: N802
        return math.prod(self.is_)

    def span(self) -> int:
        """The largest element offset any operand reaches, plus one (32-bit indexing below 2^31)."""
        reach = [off + sum((n - 1) * s for n, s in zip(self.sizes, st, strict=True))
                 for st, off in zip(self.strides, self.offsets, strict=True)]
        return max([self.O * self.L, *[r + 1 for r in reach]])


def squash(sizes: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours whose strides chain for every operand."""
    out_sizes: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d, n in enumerate(sizes):
        if n == 1:
            continue
        if out_sizes and all(t[-1] == st[d] * n for t, st in zip(out_strides, strides, strict=True)):
            out_sizes[-1] *= n
            for t, st in zip(out_strides, strides, strict=True):
                t[-1] = st[d]
            continue
        out_sizes.append(n)
        for t, st in zip(out_strides, strides, strict=True):
            t.append(st[d])
    return out_sizes, out_strides


def coalesce(sizes: tuple[int, ...], strides: list[tuple[int, ...]], offsets: list[int], nred: int) -> Geometry:
    nd = len(sizes)
    os_, ost = squash(list(sizes[:nd - nred]), [list(s[:nd - nred]) for s in strides])
    is_, ist = squash(list(sizes[nd - nred:]), [list(s[nd - nred:]) for s in strides])
    if nred == 0 and os_:  # pointwise: the innermost dim is the element loop
        is_, ist = [os_.pop()], [[t.pop()] for t in ost]
    return Geometry(tuple(sizes), list(strides), list(offsets), os_, is_, ost, ist)


class _Recorder:
    """Stands in for the extension: records each kernel call's operands."""

    def __init__(self) -> None:
        self.calls: dict[str, list] = {}

    def __getattr__(self, name: str):
        def call(tensors):
            self.calls.setdefault(name, []).append(
                [(tuple(t.shape), tuple(t.stride()), t.storage_offset()) for t in tensors])
        return call


class _Owner:
    def __init__(self, tensors: dict[str, object]) -> None:
        self._tensors = tensors

    def get_parameter(self, key: str):
        return self._tensors[key]

    get_buffer = get_parameter


def kernel_geometry(plan: Plan, graph: Graph) -> dict[str, Geometry]:
    """Each kernel's Geometry, from forward run on meta tensors. A kernel called twice with
    different operands (never by plan.py today) is left out: render_cuda then says so."""
    import torch

    def meta(node) -> torch.Tensor:
        """The tensor as forward will get it: an input with the strides get_inputs gave it (the
        capture records them), a parameter or buffer contiguous (ModelNew allocates them so)."""
        dtype = getattr(torch, node.dtype.replace("torch.", ""))
        stride = node.attrs.get("stride")
        if stride is not None:
            return torch.empty_strided(node.shape, stride, dtype=dtype, device="meta")
        return torch.empty(node.shape, dtype=dtype, device="meta")

    sources = [n for n in graph.nodes.values() if n.kind == "source"]
    inputs: list[object] = [None] * (1 + max([n.attrs["key"] for n in sources if n.op == "input"], default=-1))
    state: dict[str, object] = {}
    for node in sources:
        if node.op == "input":
            inputs[node.attrs["key"]] = meta(node)
        elif node.op in ("param", "buffer"):
            state[node.attrs["key"]] = meta(node)
    ext = _Recorder()
    scope: dict[str, object] = {"_dev": torch.device("meta"), "inputs": inputs}
    batch = traced_batch(graph)
    if batch is not None:  # the steps of a candidate for any batch size name B (batchdims.py)
        scope[BATCH] = batch
    # interpreted, never exec'd: the steps' names came from the captured graph (interpret.py)
    run_steps(plan.lines, scope, _Owner(state), ext)
    out: dict[str, Geometry] = {}
    for kernel in plan.kernels:
        calls = ext.calls.get(kernel.name, [])
        if not calls or any(c != calls[0] for c in calls):
            continue
        ops = calls[0]
        if any(shape != ops[0][0] for shape, _, _ in ops):
            continue
        out[kernel.name] = coalesce(ops[0][0], [s for _, s, _ in ops], [o for _, _, o in ops], len(kernel.dims))
    return out
