"""The CUDA kernel bodies for pointwise and row kernels (layouts: emit_cuda's docstring)."""

from __future__ import annotations

from kcoder.policy.cuda_device import INIT
from kcoder.policy.cuda_unit import (
    SPLIT_BLOCKS,
    SPLIT_MAX,
    VEC,
    Unit,
    accumulate,
    bases,
    cache_rows,
    head,
    lanes,
    loop,
    outputs,
    pointers,
    row_stmts,
    stage_result,
    used,
)
from kcoder.policy.stages import online_pairs, online_update


def pointwise_kernel(u: Unit) -> list[str]:
    k, it = u.k, u.it
    targets = [v for _, v in k.stores]
    body = u.element(targets, u.stores(True), True)
    stores = {i for i, _ in k.stores if i in u.vec}
    lines = ["template <int V>", f"__global__ void __launch_bounds__(THREADS) {k.name}_kernel(const KPtrs a) {{"]
    lines += pointers(u)
    lines += [f"  constexpr {it} kL = {u.g.L};", f"  constexpr {it} kN = {u.g.O * u.g.L};",
              f"  const {it} first = (({it})blockIdx.x * THREADS * UNROLL + threadIdx.x) * V;",
              "  #pragma unroll", "  for (int n = 0; n < UNROLL; ++n) {",
              f"    const {it} i0 = first + ({it})n * THREADS * V;",
              "    if (i0 >= kN) break;",
              f"    const {it} o = i0 / kL, r0 = i0 - o * kL;"]
    lines += bases(u, "    ")
    lines += lanes(u, body, used(u, targets), stores, "    ")
    return lines + ["  }", "}"]


def row_kernel(u: Unit) -> list[str]:
    """block, warp, column or thread layout: one kernel, the stages one after another.
    column: 32 adjacent rows (columns of the strided data) a block, lane tx on row
    blockIdx.x * 32 + tx and warp ty on the elements ty, ty + kY, ... of it, so each warp load
    is 32 adjacent addresses and a block's 8 (kY) warps walk the row together; a thread past
    the last row works on the last row's data (every thread reaches the block's barriers) and
    stores nothing."""
    k, lay, it = u.k, u.layout, u.it
    tid, nthr = {"block": ("threadIdx.x", "THREADS"), "warp": ("(threadIdx.x & 31)", "32"),
                 "thread": ("0", "1"), "column": ("ty", "kY")}[lay]
    shared = {"block": ["  __shared__ Acc sh[32];"], "column": ["  __shared__ Acc sh[THREADS];"]}.get(lay, [])
    lines = head(u, "const KPtrs a", shared)
    lines += {"block": [f"  const {it} o = blockIdx.x;"],
              "warp": [f"  const {it} o = ({it})blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);",
                       "  if (o >= kO) return;"],
              "thread": [f"  const {it} o = ({it})blockIdx.x * THREADS + threadIdx.x;", "  if (o >= kO) return;"],
              "column": ["  constexpr int kY = THREADS / 32;", "  const int ty = threadIdx.x >> 5;",
                         f"  const {it} o_live = ({it})blockIdx.x * 32 + (threadIdx.x & 31);",
                         "  const bool live = o_live < kO;",
                         f"  const {it} o = live ? o_live : kO - 1;"]}[lay]
    lines += bases(u, "  ") + row_stmts(u, -1)
    if u.cached:
        lines += cache_rows(u, tid, nthr)
    # online max + sum saves a read from memory; a row in registers has none to save, and two
    # plain passes (a max, then exp and add) cost fewer instructions than the online update
    pairs = set() if u.cached else online_pairs(k)
    for n, st in enumerate(k.stages):
        if n - 1 in pairs:
            continue  # its sum came out of the pass before (online)
        kind = "lse" if n in pairs else st.kind
        if n in pairs:
            lines += [f"  float m{n} = -INFINITY, s{n} = 0.0f;"]
            lines += loop(u, [st.value], online_update(f"m{n}", f"s{n}", st.value), set(), tid, nthr, ("0", "kL"))
            lines.append(f"  Acc a{n} = Acc{{(double)m{n}, __double_as_longlong((double)s{n})}};")
        else:
            declare, update, finish, around = accumulate(u, st, n)
            lines += declare + loop(u, [st.value], update, set(), tid, nthr, ("0", "kL"), around) + finish
        if lay == "block":
            lines.append(f"  a{n} = kc_block_reduce<C_{kind}>(a{n}, {INIT[kind]}, sh);")
        elif lay == "warp":
            lines.append(f"  a{n} = kc_warp_reduce<C_{kind}>(a{n});")
        elif lay == "column":
            lines.append(f"  a{n} = kc_column_reduce<C_{kind}>(a{n}, sh);")
        lines += stage_result(st, n) + row_stmts(u, n)
        if n in pairs:
            second = k.stages[n + 1]
            lines += [f"  const {second.ctype} {second.result} = ({second.ctype})__longlong_as_double(a{n}.i);"]
            lines += row_stmts(u, n + 1)
    full, stores, rows = outputs(u)
    if full:
        body = loop(u, full, u.stores(True), stores, tid, nthr, ("0", "kL"))
        lines += ["  if (live) {", *body, "  }"] if lay == "column" else body
    if rows:
        lines.append({"block": "  if (threadIdx.x == 0) {", "warp": "  if ((threadIdx.x & 31) == 0) {",
                      "thread": "  {", "column": "  if (live && ty == 0) {"}[lay])
        lines += [f"    p{i}[b{i}] = {v};" for i, v in rows] + ["  }"]
    return lines + ["}"]


def _split_sizes(u: Unit) -> list[str]:
    """S: chunks per row (enough blocks to fill the GPU, each with several vectors per thread);
    C: the chunk length, a multiple of THREADS * VEC so every chunk starts aligned. Macros, not
    constexprs: the compiler folds them all the same, and where the rows or the length follow
    the batch (cuda_batch.py) they read it where they are used (kernels and launcher)."""
    n, rows, L = u.k.name, u.g.O, u.g.L
    return [f"#define {n}_S0 (({SPLIT_BLOCKS}LL + {rows}LL - 1) / {rows}LL)",
            f"#define {n}_S1 (({L}LL + THREADS * {VEC} * 4 - 1) / (THREADS * {VEC} * 4))",
            f"#define {n}_S2 ({n}_S0 < {n}_S1 ? {n}_S0 : {n}_S1)",
            f"#define {n}_S ({n}_S2 < 1LL ? 1LL : {n}_S2 > {SPLIT_MAX}LL ? {SPLIT_MAX}LL : {n}_S2)",
            f"#define {n}_T ((long long)THREADS * {VEC})",
            f"#define {n}_C ((({L}LL + {n}_S - 1) / {n}_S + {n}_T - 1) / {n}_T * {n}_T)",
            f"#define {n}_Y ((unsigned)(({L}LL + {n}_C - 1) / {n}_C))"]


def split_kernels(u: Unit) -> list[str]:
    """One kernel per phase: phase p < stages reduces stage p over this block's chunk, the row's
    last block combining the partials into res; the last phase writes the full-size outputs."""
    k, it, ns = u.k, u.it, len(u.k.stages)
    full, stores, rows = outputs(u)
    lines = _split_sizes(u)
    for ph in range(ns + (1 if full else 0)):
        params = "const KPtrs a, Acc* __restrict__ part, unsigned* __restrict__ count, Acc* __restrict__ res"
        top = head(u, params, ["  __shared__ Acc sh[32];", "  __shared__ bool kc_last;"])
        top[1] = top[1].replace(f"{k.name}_kernel(", f"{k.name}_p{ph}(")
        lines += top + [f"  const {it} o = blockIdx.x;"] + bases(u, "  ")
        lines += [f"  const {it} lo = ({it})blockIdx.y * ({it}){k.name}_C;",
                  f"  const {it} hi = lo + ({it}){k.name}_C < kL ? lo + ({it}){k.name}_C : kL;"]
        lines += row_stmts(u, -1)
        for n in range(ph):
            lines += [f"  const Acc a{n} = res[o * {ns} + {n}];"] + stage_result(k.stages[n], n) + row_stmts(u, n)
        if ph == ns:
            lines += loop(u, full, u.stores(True), stores, "threadIdx.x", "THREADS", ("lo", "hi"))
            if rows:
                lines += ["  if (blockIdx.y == 0 && threadIdx.x == 0) {"]
                lines += [f"    p{i}[b{i}] = {v};" for i, v in rows] + ["  }"]
            lines.append("}")
            continue
        st = k.stages[ph]
        declare, update, finish, around = accumulate(u, st, ph)
        lines += declare + loop(u, [st.value], update, set(), "threadIdx.x", "THREADS", ("lo", "hi"), around)
        lines += finish
        lines += _split_combine(st.kind, ph, ns)
        if ph == ns - 1 and not full and rows:
            lines += stage_result(st, ph) + row_stmts(u, ph)
            lines += ["  if (threadIdx.x == 0) {"] + [f"    p{i}[b{i}] = {v};" for i, v in rows] + ["  }"]
        lines.append("}")
    return lines


def _split_combine(kind: str, n: int, ns: int) -> list[str]:
    """Every block stores its partial; the row's last block (an atomic count) combines them."""
    return [f"  a{n} = kc_block_reduce<C_{kind}>(a{n}, {INIT[kind]}, sh);",
            "  if (threadIdx.x == 0) {",
            f"    part[o * gridDim.y + blockIdx.y] = a{n};",
            "    __threadfence();  // the partial is visible before the count says so",
            f"    kc_last = atomicAdd(&count[o * {ns} + {n}], 1u) == gridDim.y - 1;",
            "  }",
            "  __syncthreads();",
            "  if (!kc_last) return;",
            "  __threadfence();",
            f"  a{n} = {INIT[kind]};",
            "  for (unsigned s = threadIdx.x; s < gridDim.y; s += THREADS) {  // L2 reads: other blocks wrote them",
            "    const Acc* q = part + o * gridDim.y + s;",
            f"    a{n} = C_{kind}::c(a{n}, Acc{{__ldcg(&q->v), __ldcg(&q->i)}});",
            "  }",
            f"  a{n} = kc_block_reduce<C_{kind}>(a{n}, {INIT[kind]}, sh);",
            f"  if (threadIdx.x == 0) res[o * {ns} + {n}] = a{n};"]
