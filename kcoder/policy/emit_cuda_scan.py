"""CUDA scan kernels (cumsum/cumprod along one dim), specialized like the rest of emit_cuda.

"warp": many long contiguous rows, a warp per row (warp_scan_kernel's docstring).

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


SCAN_E = 16  # elements a lane scans in registers (a warp's chunk: 32 * SCAN_E)


def _skew(j: str) -> str:
    """A chunk element's slot in the warp's transpose buffer: one pad word every 32, so the
    lanes' 16-element runs and the 4-element vectors both land in distinct banks."""
    return f"(({j}) + (({j}) >> 5))"


def warp_scan_kernel(u: Unit) -> list[str]:
    """A warp per row (many contiguous rows), chunk by chunk of 32 * SCAN_E elements: lane l
    scans elements l*E .. l*E+E-1 of the chunk in registers (double), a shuffle scan of the 32
    lane totals gives each lane its prefix, a carry crosses chunks. Contiguous aligned float
    operands (u.vec; the V == 4 instance) move between memory and the lanes through a per-warp
    shared-memory transpose, so every global access is a 16-byte vector and the warp's are
    adjacent; a row's last, partial chunk and the other operands are read element by element."""
    k, it = u.k, u.it
    scan = k.scan
    assert scan is not None and set(row_levels(k)) <= {-1}
    before, after = scan_parts(k)
    op, e_n, chunk = f"S_{scan.kind}", SCAN_E, 32 * SCAN_E
    loads = sorted(i for i in u.vec if not k.operands[i].output
                   and any(f"LOAD{i}" in s.expr for s in before + after))
    outs = sorted(i for i, _ in k.stores if i in u.vec)[:1]  # one output through the buffer
    lines = head(u, "const KPtrs a", [f"  __shared__ float kc_tb[THREADS / 32][{chunk + chunk // 32}];"])
    lines += [f"  const {it} o = ({it})blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);",
              "  if (o >= kO) return;  // the whole warp: o is the warp's",
              "  const int lane = threadIdx.x & 31;", "  float* tb = kc_tb[threadIdx.x >> 5];"]
    lines += bases(u, "  ")
    load = u.load(False)
    lines += [f"  const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in row_levels(k).get(-1, [])]
    pos = "kL - 1 - i" if scan.reverse else "i"
    # the chunk's first element in memory, and chunk element j of vector m's lane t
    start = f"(kL - c - {chunk})" if scan.reverse else "c"
    elem = (lambda m, t: f"({chunk - 1} - (4 * ({m}) + {t}))") if scan.reverse else (lambda m, t: f"(4 * ({m}) + {t})")

    def vload(i: int) -> str:
        return f"xr{i}[e]"

    def fn(full: bool):
        def f(i: int) -> str:
            return vload(i) if full and i in loads else load(i)
        return f

    lines += [f"  double carry = {scan.identity};", f"  for ({it} c = 0; c < kL; c += {chunk}) {{",
              f"    const bool full = V == 4 && c + {chunk} <= kL;  // uniform over the warp",
              f"    double run[{e_n}];", f"    double acc = {scan.identity};"]
    lines += [f"    float xr{i}[{e_n}];" for i in loads]
    if loads:
        lines.append("    if (full) {")
        for i in loads:
            lines += ["      #pragma unroll", "      for (int v = 0; v < 4; ++v) {",
                      "        const int m = lane + 32 * v;",
                      f"        const float4 g = *reinterpret_cast<const float4*>(p{i} + b{i} + {start} + 4 * m);"]
            lines += [f"        tb[{_skew(elem('m', t))}] = g.{c};" for t, c in enumerate("xyzw")]
            lines += ["      }", "      __syncwarp();", "      #pragma unroll",
                      f"      for (int e = 0; e < {e_n}; ++e) xr{i}[e] = tb[{_skew(f'lane * {e_n} + e')}];",
                      "      __syncwarp();"]
        lines.append("    }")
    for full in ([True, False] if loads else [False]):
        if loads:
            lines.append("    if (full) {" if full else "    } else {")
        lines += ["    #pragma unroll", f"    for (int e = 0; e < {e_n}; ++e) {{",
                  f"      const {it} i = c + lane * {e_n} + e;", f"      double x = {scan.identity};",
                  "      if (i < kL) {", f"        const {it} r = {pos};"]
        lines += [f"        const {s.ctype} {s.var} = {substitute(s.expr, fn(full))};" for s in before]
        lines += [f"        x = (double)({scan.value});", "      }"]
        step = ["run[e] = acc;", f"acc = {op}::c(acc, x);"] if scan.exclusive else [f"acc = {op}::c(acc, x);",
                                                                                      "run[e] = acc;"]
        lines += [f"      {line}" for line in step] + ["    }"]
    if loads:
        lines.append("    }")
    lines += ["    double incl = acc;  // the lanes' totals: an inclusive shuffle scan",
              "    #pragma unroll", "    for (int s = 1; s < 32; s <<= 1) {",
              "      const double y = __shfl_up_sync(0xffffffffu, incl, s);",
              f"      if (lane >= s) incl = {op}::c(y, incl);", "    }",
              "    const double total = __shfl_sync(0xffffffffu, incl, 31);",
              "    double excl = __shfl_up_sync(0xffffffffu, incl, 1);",
              f"    const double pre = {op}::c(carry, lane ? excl : {scan.identity});"]
    again = closure(k, [v for _, v in k.stores])  # another scope: the prologue's values again
    vstore = {i: v for i, v in k.stores if i in outs}
    for full in ([True, False] if outs else [False]):
        if outs:
            lines.append("    if (full) {" if full else "    } else {")
        lines += ["    #pragma unroll", f"    for (int e = 0; e < {e_n}; ++e) {{",
                  f"      const {it} i = c + lane * {e_n} + e;",
                  "      if (i < kL) {", f"        const {it} r = {pos};",
                  f"        const {scan.ctype} {scan.result} = ({scan.ctype}){op}::c(pre, run[e]);"]
        lines += [f"        const {s.ctype} {s.var} = {substitute(s.expr, fn(full and bool(loads)))};" for s in again]
        for line in u.stores(False):
            idx = int(line[1:line.index("[")])
            lines.append(f"        tb[{_skew(f'lane * {e_n} + e')}] = {vstore[idx]};" if full and idx in vstore
                         else f"        {substitute(line, fn(full))}")
        lines += ["      }", "    }"]
        if full:
            for i in outs:
                lines += ["    __syncwarp();", "    #pragma unroll", "    for (int v = 0; v < 4; ++v) {",
                          "      const int m = lane + 32 * v;",
                          f"      *reinterpret_cast<float4*>(p{i} + b{i} + {start} + 4 * m) = make_float4("
                          + ", ".join(f"tb[{_skew(elem('m', t))}]" for t in range(4)) + ");",
                          "    }", "    __syncwarp();"]
    if outs:
        lines.append("    }")
    return lines + [f"    carry = {op}::c(carry, total);", "  }", "}"]
