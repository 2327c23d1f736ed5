"""Algebraic rewrites of the captured graph before planning: identities that hold for every
input and every weight, so the candidate does less work than the module asked for, as a person
writing the kernel by hand would.

What "holds" means here: the two sides are equal in real arithmetic for all values, and a NaN
anywhere in the inputs or weights still reaches the same outputs (so `x - x -> 0` is not a rule:
it would hide a NaN or an Inf). Floating-point rounding may differ (a sum taken in another
order); every rule is tested against eager on random inputs and random weights within the
judge's fp32 tolerances (tests/policy/test_rewrite.py), and the judge still decides on every
candidate. Overflow of an intermediate that the other side never forms (x * 1e30 * 1e-30)
is the one way a rewritten value can differ beyond rounding; the scalar fold refuses such
constants.

A rule is a small function `rule(graph, node, users) -> bool` that rewrites the graph at `node`
when its exact pattern holds (ops, dims, keepdim, dtypes, and no other consumer of an
intermediate it drops) and says whether it did. `RULES` is the table, tried in order on every
node until none applies. The linear-map rules (a reduction over a GEMM's or a transposed
convolution's output becomes a reduction of its weights) are in rewrite_linear.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kcoder.policy.nodes import Graph, Node, Ref
from kcoder.policy.rewrite_linear import conv_transpose_sum, gemm_sum
from kcoder.policy.rewrite_util import F32, OUTPUT, Users, is_number, redirect, splice, users_of

Rule = Callable[[Graph, Node, Users], bool]
MAX_STEPS = 10_000  # a guard against two rules undoing each other (none does)
# The scalar fold keeps a product of constants within float32's normal range (see the docstring).
FOLD_RANGE = (1e-30, 1e30)


def _scalar_arg(node: Node) -> tuple[Ref, float] | None:
    """(the tensor operand, the scalar) of a float32 mul/div by a Python number, else None."""
    if node.kind != "pw" or node.dtype != F32 or len(node.args) != 2 or node.attrs.get("rounding_mode"):
        return None
    a, b = node.args
    if node.op == "mul" and is_number(a) and isinstance(b, Ref):
        a, b = b, a
    if node.op in ("mul", "div") and isinstance(a, Ref) and is_number(b):
        return a, float(b)
    return None


def identity_scalar(g: Graph, node: Node, users: Users) -> bool:
    """x * 1, 1 * x, x / 1, x + 0, 0 + x, x - 0 are x (same shape and dtype: no broadcast or
    promotion hidden in the op). x + 0 turns -0.0 into +0.0, which compares equal."""
    if node.kind != "pw" or len(node.args) != 2 or node.attrs.get("alpha", 1) != 1:
        return False
    a, b = node.args
    unit = {"mul": 1, "div": 1, "add": 0, "sub": 0}.get(node.op)
    if unit is None or node.attrs.get("rounding_mode"):
        return False
    if node.op in ("mul", "add") and is_number(a) and isinstance(b, Ref):
        a, b = b, a
    if not (isinstance(a, Ref) and is_number(b) and float(b) == unit and not isinstance(b, bool)):
        return False
    x = g.nodes[a.name]
    if x.shape != node.shape or x.dtype != node.dtype:
        return False
    redirect(g, node.name, a)
    return True


def double_to_scale(g: Graph, node: Node, users: Users) -> bool:
    """x + x is 2 * x exactly in floating point (Inf and NaN included): one operand, and the
    linear-map rules see a scale they can carry."""
    if node.kind != "pw" or node.op != "add" or len(node.args) != 2 or node.attrs.get("alpha", 1) != 1:
        return False
    a, b = node.args
    if not (isinstance(a, Ref) and a == b and node.dtype == F32 and g.nodes[a.name].dtype == F32):
        return False
    g.nodes[node.name] = Node(node.name, "pw", "mul", [a, 2.0], node.shape, node.dtype, {}, node.aten)
    return True


def fold_scalars(g: Graph, node: Node, users: Users) -> bool:
    """(x * a) * b, (x / a) * b, (x * a) / b ... become one multiply x * c (c computed in double,
    rounded once): at most a couple of ulps from the chain, never a cancellation. Only where the
    inner product has no other consumer and c is a normal float32 of moderate size."""
    outer = _scalar_arg(node)
    if outer is None:
        return False
    inner_ref, b = outer
    inner = g.nodes[inner_ref.name]
    inner_arg = _scalar_arg(inner)
    if inner_arg is None or users[inner.name] != [node.name] or inner.shape != node.shape:
        return False
    x, a = inner_arg
    if 0.0 in (a, b) or not all(map(_moderate, (a, b))):
        return False
    c = (a if inner.op == "mul" else 1.0 / a) * (b if node.op == "mul" else 1.0 / b)
    if not _moderate(c):
        return False
    g.nodes[node.name] = Node(node.name, "pw", "mul", [x, c], node.shape, node.dtype, {}, node.aten)
    return True


def _moderate(v: float) -> bool:
    return FOLD_RANGE[0] <= abs(v) <= FOLD_RANGE[1]


def trivial_reduction(g: Graph, node: Node, users: Users) -> bool:
    """A sum, max, min or prod over dims that all have size 1 is its input (a reshape when
    keepdim is False): one element reduced is that element, NaN included."""
    if node.kind != "reduce" or node.op not in ("sum", "max", "min", "prod"):
        return False
    x = g.nodes[node.args[0].name]
    dims = node.attrs["dims"]
    if x.dtype != node.dtype or not all(0 <= d < len(x.shape) and x.shape[d] == 1 for d in dims):
        return False
    if x.shape == node.shape:
        redirect(g, node.name, node.args[0])
    else:
        g.nodes[node.name] = Node(node.name, "view", "reshape", [node.args[0], list(node.shape)], node.shape,
                                  node.dtype, {}, node.aten)
    return True


def gemm_bias_relu(g: Graph, node: Node, users: Users) -> bool:
    """relu(A @ B + bias) and A @ B + bias, with a bias over B's columns, become one library call
    (torch._addmm_activation / torch.addmm: cuBLASLt's bias and ReLU epilogue) where the value is
    materialized anyway (a graph output or a library call's operand), so no epilogue kernel is
    left; not where it would leave the candidate without a kernel of its own. Under --allow gemm
    only, as any GEMM. (GELU is not fused: cuBLASLt's GELU epilogue is
    the tanh form on CUDA while the CPU fallback computes the erf form.)"""
    if node.kind != "pw" or node.dtype != F32 or any(u != OUTPUT and g.nodes[u].kind != "lib"
                                                     for u in users.get(node.name, [])):
        return False
    add, relu = (g.nodes[node.args[0].name], True) if node.op == "relu" and isinstance(node.args[0], Ref) \
        else (node, False)
    if relu and users[add.name] != [node.name]:
        return False
    if add.kind != "pw" or add.op != "add" or add.attrs.get("alpha", 1) != 1 or len(add.args) != 2 or \
            not all(isinstance(a, Ref) for a in add.args):
        return False
    if not any(g.nodes[n].kind in ("pw", "reduce", "scan") for n in g.needed() if n not in (node.name, add.name)):
        return False  # a candidate of library calls alone has nothing of the policy's own to judge
    for mm_ref, bias in (add.args, add.args[::-1]):
        mm, b = g.nodes[mm_ref.name], g.nodes[bias.name]
        if mm.kind == "lib" and mm.op == "mm" and users[mm.name] == [add.name] and len(mm.shape) == 2 and \
                b.shape == mm.shape[1:] and b.dtype == F32 and mm.dtype == F32 and add.shape == mm.shape:
            op = "_addmm_activation" if relu else "addmm"
            g.nodes[node.name] = Node(node.name, "lib", op, [bias, *mm.args[:2]], node.shape, F32,
                                      {"needs": "gemm"}, mm.aten)
            return True
    return False


RULES: list[tuple[str, Rule]] = [
    ("identity_scalar", identity_scalar),
    ("double_to_scale", double_to_scale),
    ("fold_scalars", fold_scalars),
    ("trivial_reduction", trivial_reduction),
    ("gemm_sum", gemm_sum),
    ("conv_transpose_sum", conv_transpose_sum),
    ("gemm_bias_relu", gemm_bias_relu),
]


def rewrite(g: Graph, allow: Sequence[str] = (), rules: list[tuple[str, Rule]] | None = None) -> list[str]:
    """Apply `rules` (default: RULES) to `g` in place until none applies; the names of the rules
    applied, with the node each one rewrote ("gemm_sum@sum_1"), in order. `allow`: the library
    calls the user allows (gemm, conv), which some rules use. Nodes no output needs any more are
    dropped (sources stay: ModelNew registers every parameter)."""
    table = RULES if rules is None else rules
    applied: list[str] = []
    for _ in range(MAX_STEPS):
        users = users_of(g, frozenset(allow))
        hit = next(((rule_name, name) for name in g.needed() for rule_name, rule in table
                    if rule(g, g.nodes[name], users)), None)
        if hit is None:
            break
        applied.append(f"{hit[0]}@{hit[1]}")
    _prune(g)
    return applied


def _prune(g: Graph) -> None:
    keep = set(g.needed())
    splice(g, {name: node for name, node in g.nodes.items() if name in keep or node.kind == "source"})


__all__ = ["OUTPUT", "RULES", "Rule", "rewrite", "identity_scalar", "double_to_scale", "fold_scalars",
           "trivial_reduction", "gemm_sum", "conv_transpose_sum", "gemm_bias_relu"]
