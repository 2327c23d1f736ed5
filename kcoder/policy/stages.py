"""Reduction stages that can share one pass over a row (the cuda target's online softmax).

softmax, log-softmax, logsumexp and cross-entropy reduce a row twice: m = max(x), then
s = sum(exp(x - m)). Read naively that is two passes over x; with a running max whose sum is
rescaled when the max grows (the "online softmax") both come out of one pass, and only the
outputs need a second one.
"""

from __future__ import annotations

from kcoder.policy.kernel import Kernel


def online_pairs(kernel: Kernel) -> set[int]:
    """Stage indices n where stage n is max(X) and stage n + 1 is sum(expf(X - max)): one pass."""
    by_var = {s.var: s for s in kernel.stmts if not s.row}
    found: set[int] = set()
    for n in range(len(kernel.stages) - 1):
        first, second = kernel.stages[n], kernel.stages[n + 1]
        if n - 1 in found or first.kind != "max" or second.kind != "sum" or first.ctype != "float":
            continue
        e = by_var.get(second.value)
        if e is None or not (e.expr.startswith("expf(") and e.expr.endswith(")")):
            continue
        d = by_var.get(e.expr[len("expf("):-1])
        if d is not None and d.expr == f"({first.value} - {first.result})":
            found.add(n)
    return found


def online_update(m: str, s: str, x: str) -> list[str]:
    """One element x into a thread's running max m and sum s of exp(x - m), both float (a
    thread's share of a row is short; the threads' pairs then combine in double, C_lse).
    -inf adds nothing (so a thread that has seen only -inf stays at s = 0) and NaN sticks."""
    return ["{",
            f"  const float kx = (float)({x});",
            f"  if (kx > {m}) {{ {s} = {s} * expf({m} - kx) + 1.0f; {m} = kx; }}",
            f"  else if (kx != kx) {{ {m} = kx; {s} = NAN; }}",
            f"  else if (kx != -INFINITY) {s} += expf(kx - {m});",
            "}"]
