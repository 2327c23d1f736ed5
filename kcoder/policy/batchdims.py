"""A candidate for any batch size: the dims that follow the batch written as expressions of it.

capture.py traces Model.forward at the problem's batch size and at BATCH_SIZES more (the
inputs' first rows). A dim of a node that is the same in every trace is a constant; one that is
c times the batch in every trace is written `B * c` in forward (B: the first scaled input's
leading dim at run time); any other is not expressible, and the candidate is then made for the
problem's own shapes. The planner sees plain ints (Dim is an int); only the Python shapes
forward renders carry the expression.

A float constant that is 1 / (c * batch + d) in every trace (a mean's 1/N over dims that include
the batch, a variance's 1/(N - correction)) becomes a BatchScalar on the cpu target: the C++
computes it at run time from `kc_batch`, which forward sets from B (emit_cpu.py).

Whether a kernel depends on the batch is not reasoned out: the candidate is planned and rendered
for every traced batch size, and it is batch-generic only if every rendering is the same text. A
constant that follows the batch (a mean's 1/N), a shape baked into a CUDA kernel, a layout chosen
by the row count: each makes the texts differ, and the candidate is then made for the problem's
own shapes, with a guard in forward that names them.
"""

from __future__ import annotations

from typing import Any

BATCH = "B"


BATCH_VAR = "kc_batch"  # the same batch in the kernels' C++ (BATCH_SETTER sets it)
# The batch size forward was called at, for the constants that follow it (a mean's 1/N over the
# batch, a CUDA kernel's row count): set by forward before the kernels run (program.py).
BATCH_SETTER = f"""static int64_t {BATCH_VAR} = 1;
void {BATCH_VAR}_set(int64_t b) {{ {BATCH_VAR} = b; }}
"""


class Dim(int):
    """A size that follows the batch: its value at the traced batch, `factor` times the batch."""

    factor: int

    def __new__(cls, value: int, factor: int) -> Dim:
        dim = super().__new__(cls, value)
        dim.factor = factor
        return dim

    @property
    def expr(self) -> str:
        """The size in terms of B, as forward writes it."""
        return BATCH if self.factor == 1 else f"{BATCH} * {self.factor}"


class BatchScalar(float):
    """A float constant 1 / (c * B + d): its value at the traced batch, and `cexpr` in C++ terms of
    the run-time `kc_batch` (computed in double and rounded once, as the literal was)."""

    cexpr: str

    def __new__(cls, value: float, c: int, d: int) -> BatchScalar:
        scalar = super().__new__(cls, value)
        count = f"{BATCH_VAR} * {c}" + (f" + {d}" if d > 0 else f" - {-d}" if d < 0 else "")
        scalar.cexpr = f"((float)(1.0 / (double)({count})))"
        return scalar


def dim_py(size: int) -> str:
    return size.expr if isinstance(size, Dim) else repr(int(size))


def shape_py(shape: tuple[int, ...]) -> str:
    """A shape as a Python tuple literal, the batch's dims as expressions."""
    items = [dim_py(s) for s in shape]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def annotate(graphs: list[Any], sizes: list[int], scalars: bool = False) -> bool:
    """Mark, in every graph, the dims that are c * batch in all of them (graphs[i] traced at batch
    sizes[i]), and with `scalars` the float constants that are 1 / (c * batch + d); False when the
    graphs' nodes differ or a dim changes in any other way."""
    names = [list(g.nodes) for g in graphs]
    if any(n != names[0] for n in names[1:]):
        return False
    for name in names[0]:
        nodes = [g.nodes[name] for g in graphs]
        if scalars and not _mark_scalars(nodes, sizes):
            return False
        shapes = [tuple(n.shape) if n.shape is not None else None for n in nodes]
        if any((s is None) != (shapes[0] is None) for s in shapes):
            return False
        if shapes[0] is None:
            continue
        if any(len(s) != len(shapes[0]) for s in shapes):
            return False
        factors = [_factor([s[d] for s in shapes], sizes) for d in range(len(shapes[0]))]
        if any(f is False for f in factors):
            return False
        for node, shape in zip(nodes, shapes, strict=True):
            node.shape = tuple(v if f is None else Dim(v, f) for v, f in zip(shape, factors, strict=True))
    return True


def _mark_scalars(nodes: list[Any], sizes: list[int]) -> bool:
    """A pointwise node's float args that differ between traces marked as BatchScalar; False
    when one differs in any other way (the candidate is then made for the problem's shapes)."""
    if nodes[0].kind != "pw" or any(len(n.args) != len(nodes[0].args) for n in nodes):
        return True
    for i in range(len(nodes[0].args)):
        values = [n.args[i] for n in nodes]
        if not all(isinstance(v, float) for v in values) or all(v == values[0] for v in values):
            continue
        fit = _reciprocal(values, sizes)
        if fit is None:
            return False
        for node, value in zip(nodes, values, strict=True):
            node.args = [*node.args[:i], BatchScalar(value, *fit), *node.args[i + 1:]]
    return True


def _reciprocal(values: list[float], sizes: list[int]) -> tuple[int, int] | None:
    """(c, d) with values[k] == 1 / (c * sizes[k] + d) in every trace (whole c, d), or None."""
    if any(v == 0 or v != v or abs(v) == float("inf") for v in values):
        return None
    counts = [round(1.0 / v) for v in values]
    if any(abs(1.0 / v - n) > 1e-6 * abs(n) for v, n in zip(values, counts, strict=True)):
        return None
    return affine(counts, sizes)


def affine(values: list[int], sizes: list[int]) -> tuple[int, int] | None:
    """(c, d), whole and c > 0, with values[k] == c * sizes[k] + d in every trace, or None."""
    if sizes[0] == sizes[1] or (values[0] - values[1]) % (sizes[0] - sizes[1]):
        return None
    c = (values[0] - values[1]) // (sizes[0] - sizes[1])
    d = values[0] - c * sizes[0]
    if c <= 0 or any(v != c * b + d for v, b in zip(values, sizes, strict=True)):
        return None
    return c, d


def _factor(values: list[int], sizes: list[int]) -> int | None | bool:
    """None: a constant; c: c times the batch in every trace; False: neither."""
    if all(v == values[0] for v in values):
        return None
    if values[0] % sizes[0] or values[0] == 0:
        return False
    c = values[0] // sizes[0]
    if any(v != c * b for v, b in zip(values, sizes, strict=True)):
        return False
    return c


def traced_batch(graph: Any) -> int | None:
    """The batch size `graph` was traced at, read from its first Dim (None: no dim follows it)."""
    for node in graph.nodes.values():
        for size in node.shape or ():
            if isinstance(size, Dim):
                return int(size) // size.factor
    return None


def made_for(graph: Any, generic: bool) -> list[tuple[int, tuple[int | None, ...]]]:
    """(input position, shape) of every tensor input, None where any size is accepted (a dim
    that follows the batch, when the candidate is batch-generic): forward's guard."""
    out = []
    for node in graph.nodes.values():
        if node.kind == "source" and node.op == "input" and node.shape is not None:
            shape = tuple(None if generic and isinstance(s, Dim) else int(s) for s in node.shape)
            out.append((int(node.attrs["key"]), shape))
    return sorted(out)
