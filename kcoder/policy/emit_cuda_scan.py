"""CUDA scan kernels (cumsum/cumprod along one dim), specialized like the rest of emit_cuda.

"block": a block per row, chunk by chunk: each thread scans UNROLL consecutive elements in
registers, a warp-shuffle block scan of the threads' totals gives each its prefix, and a running
carry crosses chunks, all in double as the reductions accumulate. "thread": a thread per row
(many strided rows: adjacent threads read adjacent addresses), sequential.
"""

from __future__ import annotations

from kcoder.policy.cuda_unit import Unit, bases, head
from kcoder.policy.emit_common import closure, row_levels, substitute
from kcoder.policy.emit_cpu import scan_parts, scan_step
from kcoder.policy.kernel import Stmt


def _stmts(u: Unit, stmts: list[Stmt], tail: list[str], indent: str) -> list[str]:
    load = u.load(False)
    return [f"{indent}{substitute(line, load)}" for line in
            [f"const {s.ctype} {s.var} = {s.expr};" for s in stmts] + tail]


def scan_kernel(u: Unit) -> list[str]:
    k, it = u.k, u.it
    scan = k.scan
    assert scan is not None and set(row_levels(k)) <= {-1}
    before, after = scan_parts(k)
    op = f"S_{scan.kind}"
    thread = u.layout == "thread"
    lines = head(u, "const KPtrs a", [] if thread else ["  __shared__ double sh[32];"])
    lines += ([f"  const {it} o = ({it})blockIdx.x * THREADS + threadIdx.x;", "  if (o >= kO) return;"]
              if thread else [f"  const {it} o = blockIdx.x;"])
    lines += bases(u, "  ")
    load = u.load(False)
    lines += [f"  const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in row_levels(k).get(-1, [])]
    pos = "kL - 1 - i" if scan.reverse else "i"
    if thread:
        lines += [f"  double acc = {scan.identity};", f"  for ({it} i = 0; i < kL; ++i) {{",
                  f"    const {it} r = {pos};"]
        lines += _stmts(u, before, scan_step(k, "acc", scan.value), "    ")
        return lines + _stmts(u, after, u.stores(False), "    ") + ["  }", "}"]
    lines += [f"  double carry = {scan.identity};",
              f"  for ({it} c = 0; c < kL; c += ({it})THREADS * UNROLL) {{",
              "    double run[UNROLL];", f"    double acc = {scan.identity};",
              "    #pragma unroll", "    for (int e = 0; e < UNROLL; ++e) {",
              f"      const {it} i = c + ({it})threadIdx.x * UNROLL + e;",
              f"      double x = {scan.identity};",
              "      if (i < kL) {", f"        const {it} r = {pos};"]
    lines += _stmts(u, before, [f"x = (double)({scan.value});"], "        ")
    step = ["run[e] = acc;", f"acc = {op}::c(acc, x);"] if scan.exclusive else [f"acc = {op}::c(acc, x);",
                                                                                  "run[e] = acc;"]
    lines += ["      }"] + [f"      {line}" for line in step] + ["    }"]
    lines += ["    double total;",
              f"    const double pre = {op}::c(carry, kc_block_scan<{op}>(acc, {scan.identity}, sh, total));",
              "    #pragma unroll", "    for (int e = 0; e < UNROLL; ++e) {",
              f"      const {it} i = c + ({it})threadIdx.x * UNROLL + e;",
              "      if (i >= kL) break;", f"      const {it} r = {pos};",
              f"      const {scan.ctype} {scan.result} = ({scan.ctype}){op}::c(pre, run[e]);"]
    again = closure(k, [v for _, v in k.stores])  # another scope: the prologue's values again
    lines += _stmts(u, again, u.stores(False), "      ")
    return lines + ["    }", f"    carry = {op}::c(carry, total);", "  }", "}"]
