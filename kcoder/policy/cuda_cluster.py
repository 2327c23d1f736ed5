"""The cluster layout (sm_90 thread block clusters) for rows passed over more than once that are
too long for registers and many enough to fill the GPU (softmax and log-softmax over long rows,
instance norm, L1/L2 norms of wide rows).

Each row is split over the CL blocks of a cluster (CL <= 8, the portable size); each block
copies its chunk of the row's operands into shared memory (16-byte loads, several in flight),
so the row is read from memory once and every later pass (the stages, then the outputs) reads
shared memory: the row costs one read and one write, where a block per row that reads it again
costs a third pass through memory. Each stage's block partial is combined across the cluster
through distributed shared memory: every block reads the CL partials and combines them in the
same order (a warp butterfly over the ranks), so every block gets the same bits. A block keeps
its partials' slots alive until the others have read them (a cluster barrier before it exits).

The launcher asks the runtime once whether a cluster of this size with this much shared memory
can be resident; where it cannot, the block-per-row kernel of the same unit runs instead.
"""

from __future__ import annotations

from kcoder.policy.cuda_device import INIT
from kcoder.policy.cuda_unit import (
    Unit,
    accumulate,
    bases,
    lanes,
    outputs,
    pointers,
    row_stmts,
    stage_result,
    used,
)
from kcoder.policy.emit_common import closure

CLUSTER_THREADS = 512  # a cluster block's threads (fixed: one or two blocks an SM, not THREADS)


def smem_bytes(u: Unit) -> int:
    return u.chunk * 4 * len(u.smem)


def _head(u: Unit) -> list[str]:
    k, it = u.k, u.it
    lines = ["template <int V>",
             f"__global__ void KC_CLUSTER_DIMS({u.cl}) __launch_bounds__({CLUSTER_THREADS}) "
             f"{k.name}_cluster(const KPtrs a) {{",
             "  extern __shared__ float4 kc_row[];  // this block's chunk of each kept operand",
             "  __shared__ Acc sh[32];", f"  __shared__ Acc kc_part[{max(1, len(k.stages))}];"]
    lines += pointers(u)
    lines += [f"  constexpr {it} kO = {u.g.O};", f"  constexpr {it} kL = {u.g.L}, kCH = {u.chunk};",
              f"  const {it} o = blockIdx.x / {u.cl};",
              f"  const {it} lo = ({it})kc_cluster_rank() * kCH;",
              f"  const {it} hi = lo + kCH < kL ? lo + kCH : kL;"]
    lines += bases(u, "  ")
    for m, i in enumerate(sorted(u.smem)):
        lines.append(f"  float* xs{i} = reinterpret_cast<float*>(kc_row) + {m} * kCH;")
    return lines


def _fill(u: Unit, first: list[str]) -> list[str]:
    """Global -> shared, kU chunks of V a thread per step with every load issued before the
    first store (each thread later reads back exactly what it stored: no barrier needed);
    `first` (the first stage's work on the V elements from r0, reading xv{i}) runs on the
    registers as they are stored, so the first stage costs no pass over shared memory."""
    it, ct = u.it, CLUSTER_THREADS
    lines = ["  {", "    constexpr int kU = V == 4 ? 4 : 8;",
             f"    for ({it} c = lo + threadIdx.x * V; c < hi; c += {ct} * V * kU) {{"]
    lines += [f"      float t{i}[kU][V];" for i in sorted(u.smem)]
    lines += ["      #pragma unroll", "      for (int n = 0; n < kU; ++n) {",
              f"        const {it} r0 = c + n * {ct} * V;", "        if (r0 < hi) {"]
    for i in sorted(u.smem):
        if i in u.vec:
            lines += ["          if constexpr (V == 4) {",
                      f"            const float4 g = *reinterpret_cast<const float4*>(p{i} + b{i} + r0);",
                      f"            t{i}[n][0] = g.x; t{i}[n][1] = g.y; t{i}[n][2] = g.z; t{i}[n][3] = g.w;",
                      f"          }} else {{ t{i}[n][0] = p{i}[b{i} + r0]; }}"]
        else:
            lines += ["          #pragma unroll",
                      f"          for (int j = 0; j < V; ++j) t{i}[n][j] = p{i}[b{i} + r0 + j];"]
    lines += ["        }", "      }", "      #pragma unroll", "      for (int n = 0; n < kU; ++n) {",
              f"        const {it} r0 = c + n * {ct} * V;", "        if (r0 < hi) {"]
    for i in sorted(u.smem):
        lines += ["          if constexpr (V == 4) {",
                  f"            *reinterpret_cast<float4*>(xs{i} + (r0 - lo)) = "
                  f"make_float4(t{i}[n][0], t{i}[n][1], t{i}[n][2], t{i}[n][3]);",
                  f"          }} else {{ xs{i}[r0 - lo] = t{i}[n][0]; }}",
                  f"          float xv{i}[V];",
                  "          #pragma unroll", f"          for (int j = 0; j < V; ++j) xv{i}[j] = t{i}[n][j];"]
    lines += ["          " + line for line in first]
    return lines + ["        }", "      }", "    }", "  }"]


def _chunk(u: Unit, targets: list[str], tail: list[str], stores: set[int],
           around: tuple[list[str], list[str]], from_smem: bool) -> list[str]:
    """The V elements from r0: kept operands from shared memory (from_smem) or from the xv{i}
    the caller declared, the others from memory."""
    body = u.element(targets, tail, True)
    text = " ".join(s.expr for s in closure(u.k, targets))
    shared = frozenset(i for i in u.smem if f"LOAD{i}" in text) if from_smem else frozenset()
    return lanes(u, body, used(u, targets) - u.smem, stores, "", around, shared)


def _pass(u: Unit, targets: list[str], tail: list[str], stores: set[int],
          around: tuple[list[str], list[str]] = ([], [])) -> list[str]:
    """One pass over this block's chunk in shared memory."""
    lines = ["  #pragma unroll 4", f"  for ({u.it} r0 = lo + threadIdx.x * V; r0 < hi; r0 += {CLUSTER_THREADS} * V) {{"]
    lines += ["    " + line for line in _chunk(u, targets, tail, stores, around, True)]
    return lines + ["  }"]


def cluster_kernel(u: Unit) -> list[str]:
    """The stages one after another (max, then sum of exp: plain passes, the row is on chip),
    each combined over the block and then over the cluster, then the full-size outputs."""
    k = u.k
    lines = _head(u) + row_stmts(u, -1)
    for n, st in enumerate(k.stages):
        declare, update, finish, around = accumulate(u, st, n)
        if n == 0:
            lines += declare + _fill(u, _chunk(u, [st.value], update, set(), around, False)) + finish
        else:
            lines += declare + _pass(u, [st.value], update, set(), around) + finish
        lines += [f"  a{n} = kc_block_reduce<C_{st.kind}>(a{n}, {INIT[st.kind]}, sh);",
                  f"  a{n} = kc_cluster_reduce<C_{st.kind}, {u.cl}>(a{n}, {INIT[st.kind]}, &kc_part[{n}]);"]
        lines += stage_result(st, n) + row_stmts(u, n)
    lines.append("  kc_cluster_arrive();  // done reading the other blocks' partials")
    full, stores, rows = outputs(u)
    if full:
        lines += _pass(u, full, u.stores(True), stores)
    if rows:
        lines += ["  if (lo == 0 && threadIdx.x == 0) {"] + [f"    p{i}[b{i}] = {v};" for i, v in rows] + ["  }"]
    return lines + ["  kc_cluster_wait();  // the others are done reading this block's partials", "}"]


def cluster_launch(u: Unit, v: int, indent: str) -> list[str]:
    """The cluster kernel where a cluster of its size and shared memory fits the device (asked
    once per instance), else the block-per-row kernel."""
    k, grid, nbytes = u.k.name, u.g.O * u.cl, smem_bytes(u)
    return [f"{indent}static const bool fits = kc_cluster_fits({k}_cluster<{v}>, {grid}u, {CLUSTER_THREADS}, "
            f"{nbytes});",
            f"{indent}if (fits) {k}_cluster<{v}><<<{grid}u, {CLUSTER_THREADS}, {nbytes}, stream>>>(a);",
            f"{indent}else {k}_kernel<{v}><<<{u.g.O}u, THREADS, 0, stream>>>(a);"]
