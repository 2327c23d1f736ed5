"""What every CUDA kernel renderer shares: a kernel with its geometry (`Unit`), the layout
chosen from its static shape, and the pieces of a kernel body (pointers, operand bases, row
loops with vector loads and stores, per-row statements)."""

from __future__ import annotations

import math
from typing import NamedTuple

from kcoder.policy.cuda_device import INIT, INIT_F, index_type, offset
from kcoder.policy.emit_common import closure, row_levels, substitute
from kcoder.policy.geometry import Geometry
from kcoder.policy.kernel import Kernel
from kcoder.policy.stages import online_pairs

VEC = 4
SPLIT_MAX_ROWS, SPLIT_MIN_LENGTH = 256, 1 << 15  # few, long rows: split across blocks
THREAD_MIN_ROWS, THREAD_MAX_LENGTH = 4096, 32  # many rows: strided (column; thread up to this long) or short
WARP_MIN_ROWS, WARP_MAX_LENGTH = 256, 1024  # many short contiguous rows: a warp each
SCAN_WARP_MIN_ROWS, SCAN_WARP_MIN_LENGTH = 1024, 512  # scans: many rows of at least a warp's chunk
SPLIT_BLOCKS, SPLIT_MAX = 1024, 1024  # a split kernel's target block count; most chunks per row
PERSIST_BLOCK, PERSIST_WARP = 8192, 2048  # most elements a block (a warp) keeps in registers per row
# the cluster layout (cuda_cluster.py)
CLUSTER_MAX = 8  # blocks a cluster (the portable limit)
CLUSTER_SMEM = 200 * 1024  # most row bytes a block keeps (an H100 block gets at most 227 KB)
CLUSTER_PAIR = 100 * 1024  # at most this much, two blocks share an SM (one loads while one writes)
CLUSTER_MIN_BLOCKS = 264  # at least two blocks per SM of an H100 (132 SMs), else the old layouts
PERSIST_COLUMN = 128  # most elements of a column a column block keeps in registers (kY = THREADS / 32 threads)


class Choices(NamedTuple):
    """What a Unit chose from its geometry: layout, index width, and for the cluster layout its
    blocks per row, elements per block and the operands kept in shared memory."""

    layout: str
    it: str
    cl: int = 0
    chunk: int = 0
    smem: frozenset[int] = frozenset()


class Unit:
    """One kernel with its geometry: what every renderer below needs."""

    def __init__(self, kernel: Kernel, geo: Geometry, fixed: Choices | None = None) -> None:
        """fixed: these choices, not this geometry's (another Unit's `choices()`: the same kernel at
        another batch size)."""
        self.k, self.g, self.it = kernel, geo, index_type(geo)
        self.layout = row_layout(kernel) if kernel.dims else "pointwise"
        # cluster layout (cuda_cluster.py): blocks per row, elements per block, the operands
        # kept in shared memory
        self.cl, self.chunk, self.smem = 0, 0, set()
        if fixed is not None:
            self.layout, self.it, self.cl, self.chunk = fixed.layout, fixed.it, fixed.cl, fixed.chunk
            self.smem = set(fixed.smem)
        elif self.layout in ("block", "split"):
            fit = cluster_fit(kernel, geo)
            if fit:
                self.layout, (self.cl, self.chunk, self.smem) = "cluster", fit
        inner_ok = (len(geo.is_) == 1 and geo.L % VEC == 0 and (not kernel.scan or self.layout == "warp")
                    and self.layout in ("pointwise", "warp", "block", "split", "cluster"))
        self.vec = {i for i, op in enumerate(kernel.operands)
                    if inner_ok and not op.row and op.ctype == "float" and geo.ist[i][0] == 1
                    and geo.offsets[i] % VEC == 0 and all(s % VEC == 0 for s in geo.ost[i])}
        self.cached = self._persistent()

    def choices(self) -> Choices:
        """What this geometry chose: `fixed` of another Unit."""
        return Choices(self.layout, self.it, self.cl, self.chunk, frozenset(self.smem))

    def _persistent(self) -> set[int]:
        """The operands a row kernel reads once into registers, when it passes over its rows
        more than once (stages, then outputs) and they fit: every later pass reads registers,
        so the row costs one read from memory (TorchInductor's persistent reductions)."""
        k = self.k
        passes = len(k.stages) + any(not k.operands[i].row for i, _ in k.stores)
        reads = {i for i, op in enumerate(k.operands) if not op.row and not op.output}
        limit = {"block": PERSIST_BLOCK, "warp": PERSIST_WARP, "column": PERSIST_COLUMN}.get(self.layout, 0)
        if k.scan or passes < 2 or not reads or self.g.L * len(reads) > limit:
            return set()
        return reads

    def ioff(self, i: int, var: str) -> str:
        return offset(self.g.is_, self.g.ist[i], var, self.it)

    def load(self, lane: bool):
        def fn(i: int) -> str:
            if self.k.operands[i].row:
                return f"p{i}[b{i}]"
            if lane and i in self.smem:
                return f"xv{i}[j]"
            if lane and i in self.cached:
                return f"xc{i}[q * V + j]"
            if lane and i in self.vec:
                return f"x{i}[j]"
            return f"p{i}[b{i} + {self.ioff(i, 'r')}]"
        return fn

    def element(self, targets: list[str], tail: list[str], lane: bool) -> list[str]:
        load = self.load(lane)
        out = [f"const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in closure(self.k, targets)]
        return out + [substitute(t, load) for t in tail]

    def stores(self, lane: bool) -> list[str]:
        out = []
        for i, v in self.k.stores:
            if self.k.operands[i].row:
                continue
            out.append(f"y{i}[j] = {v};" if lane and i in self.vec else f"p{i}[b{i} + {self.ioff(i, 'r')}] = {v};")
        return out


def row_layout(kernel: Kernel) -> str:
    """pointwise, split, column, thread, warp or block (emit_cuda's docstring says when each is used)."""
    if not kernel.dims:
        return "pointwise"
    outer = math.prod(n for d, n in enumerate(kernel.domain) if d not in kernel.dims)
    length = math.prod(kernel.domain[d] for d in kernel.dims)
    strided = len(kernel.domain) - 1 not in kernel.dims
    if kernel.scan:
        if outer >= THREAD_MIN_ROWS and (strided or length <= THREAD_MAX_LENGTH):
            return "thread"
        return "warp" if not strided and outer >= SCAN_WARP_MIN_ROWS and length >= SCAN_WARP_MIN_LENGTH else "block"
    if outer <= SPLIT_MAX_ROWS and length >= SPLIT_MIN_LENGTH:
        return "split"
    if outer >= THREAD_MIN_ROWS and strided and length > THREAD_MAX_LENGTH:
        return "column"
    if outer >= THREAD_MIN_ROWS and (strided or length <= THREAD_MAX_LENGTH):
        return "thread"
    if not strided and outer >= WARP_MIN_ROWS and length <= WARP_MAX_LENGTH:
        return "warp"
    return "block"


def cluster_fit(k: Kernel, geo: Geometry) -> tuple[int, int, set[int]] | None:
    """(blocks per row, elements per block, operands kept in shared memory) where the cluster
    layout applies, else None. Kept: the float operands read along contiguous rows that differ
    from row to row (a weight broadcast over the rows stays in L2 and is read from there)."""
    if k.scan or not k.stages or len(geo.is_) != 1:
        return None
    # passes through memory a block per row makes (an online max + sum is one): one is the floor
    passes = len(k.stages) - len(online_pairs(k)) + any(not k.operands[i].row for i, _ in k.stores)
    reads = [i for i, op in enumerate(k.operands) if not op.row and not op.output]
    kept = {i for i in reads if k.operands[i].ctype == "float" and geo.ist[i][0] == 1 and any(geo.ost[i])}
    if passes < 2 or not kept or geo.L * len(reads) <= PERSIST_BLOCK:
        return None
    fits = []
    for cl in (c for c in (1, 2, 4, 8) if c <= CLUSTER_MAX):
        chunk = -(-geo.L // cl)
        chunk = -(-chunk // VEC) * VEC
        nbytes = chunk * 4 * len(kept)
        if nbytes <= CLUSTER_SMEM and geo.O * cl >= CLUSTER_MIN_BLOCKS:
            fits.append((nbytes > CLUSTER_PAIR, cl, chunk))
    if not fits:
        return None
    _, cl, chunk = min(fits)  # two blocks an SM where some size allows it, then the fewest blocks a row
    return cl, chunk, kept


def pointers(u: Unit) -> list[str]:
    lines = []
    for i, op in enumerate(u.k.operands):
        const = "" if op.output else "const "
        lines.append(f"  {const}{op.ctype}* __restrict__ p{i} = ({const}{op.ctype}*)a.p[{i}];")
    return lines


def bases(u: Unit, indent: str) -> list[str]:
    return [f"{indent}const {u.it} b{i} = {offset(u.g.os, u.g.ost[i], 'o', u.it)};" for i in range(len(u.k.operands))]


def vector_load(i: int, dst: str) -> list[str]:
    """Operand i's V elements from r0 into `dst` + lane + "]": one float4 load when V == 4."""
    lanes = "; ".join(f"{dst}{j}] = qv.{c}" for j, c in enumerate("xyzw"))
    return ["if constexpr (V == 4) {",
            f"  const float4 qv = *reinterpret_cast<const float4*>(p{i} + b{i} + r0);",
            f"  {lanes};",
            f"}} else {{ {dst}0] = p{i}[b{i} + r0]; }}"]


def smem_load(i: int) -> list[str]:
    """Operand i's V elements from r0 out of this block's chunk in shared memory (xs{i}, from lo)."""
    return [f"float xv{i}[V];", "if constexpr (V == 4) {",
            f"  const float4 sv = *reinterpret_cast<const float4*>(xs{i} + (r0 - lo));",
            f"  xv{i}[0] = sv.x; xv{i}[1] = sv.y; xv{i}[2] = sv.z; xv{i}[3] = sv.w;",
            f"}} else {{ xv{i}[0] = xs{i}[r0 - lo]; }}"]


def lanes(u: Unit, body: list[str], loads: set[int], stores: set[int], indent: str,
          around: tuple[list[str], list[str]] = ([], []), shared: frozenset[int] = frozenset()) -> list[str]:
    """`body` for the V elements from r0: vector loads before, vector stores after (V == VEC);
    `around` is what comes before and after the V elements (a float partial sum); `shared`:
    operands read from shared memory (the cluster layout)."""
    it, out = u.it, []
    for i in sorted(shared):
        out += smem_load(i)
    for i in sorted(loads - shared):
        out += [f"float x{i}[V];"] + vector_load(i, f"x{i}[")
    out += [f"float y{i}[V];" for i in sorted(stores)]
    out += around[0] + ["#pragma unroll", "for (int j = 0; j < V; ++j) {", f"  const {it} r = r0 + j;"]
    out += ["  " + line for line in body] + ["}"] + around[1]
    for i in sorted(stores):
        out += ["if constexpr (V == 4) {",
                f"  *reinterpret_cast<float4*>(p{i} + b{i} + r0) = make_float4(y{i}[0], y{i}[1], y{i}[2], y{i}[3]);",
                f"}} else {{ p{i}[b{i} + r0] = y{i}[0]; }}"]
    return [indent + line for line in out]


def used(u: Unit, targets: list[str], among: set[int] | None = None) -> set[int]:
    """The vectorized operands (or those of `among`) the statements for `targets` read."""
    text = " ".join(s.expr for s in closure(u.k, targets))
    return {i for i in (u.vec if among is None else among) if f"LOAD{i}" in text and not u.k.operands[i].output}


def loop(u: Unit, targets: list[str], tail: list[str], stores: set[int], tid: str, nthr: str,
         bounds: tuple[str, str], around: tuple[list[str], list[str]] = ([], [])) -> list[str]:
    """A row loop from bounds[0] to bounds[1], thread `tid` of `nthr` taking V elements at a
    time, UNROLL chunks per iteration (their loads in flight together): `tail` after the
    statements for `targets`. A persistent row (u.cached) runs over its registers instead."""
    lo, hi = bounds
    body = u.element(targets, tail, True)
    if u.cached:
        out = ["  #pragma unroll", "  for (int q = 0; q < kP; ++q) {",
               f"    const {u.it} r0 = {tid} * V + q * {nthr} * V;", f"    if (r0 < {hi}) {{"]
        return out + lanes(u, body, used(u, targets) - u.cached, stores, "      ", around) + ["    }", "  }"]
    # a thread's (a column's) share of a row: scalar loads, so more of them in flight
    unroll = "(UNROLL * 4)" if u.layout in ("thread", "column") else "UNROLL"
    loads, step = used(u, targets), f"{nthr} * V"
    # whole groups of `unroll` chunks with no bound checks (their loads issue together, none
    # predicated), a float partial sum around each group; then the chunks left, one at a time
    out = [f"  {u.it} c = {lo} + {tid} * V;",
           f"  for (; c + ({unroll} - 1) * {step} < {hi}; c += {step} * {unroll}) {{"]
    out += ["    " + line for line in around[0]]
    out += ["    #pragma unroll", f"    for (int n = 0; n < {unroll}; ++n) {{",
            f"      const {u.it} r0 = c + n * {step};"]
    out += lanes(u, body, loads, stores, "      ")
    out += ["    }"] + ["    " + line for line in around[1]] + ["  }"]
    out += [f"  for (; c < {hi}; c += {step}) {{", f"    const {u.it} r0 = c;"]
    out += lanes(u, body, loads, stores, "    ", around)
    return ["  {"] + ["  " + line for line in out + ["  }"]] + ["  }"]


def cache_rows(u: Unit, tid: str, nthr: str) -> list[str]:
    """A persistent row's operands read once into registers (xc{i}[kP * V])."""
    lines = [f"  constexpr int kP = (kL + {nthr} * V - 1) / ({nthr} * V);  // chunks per thread"]
    lines += [f"  {u.k.operands[i].ctype} xc{i}[kP * V];" for i in sorted(u.cached)]
    lines += ["  #pragma unroll", "  for (int q = 0; q < kP; ++q) {",
              f"    const {u.it} r0 = {tid} * V + q * {nthr} * V;", "    if (r0 < kL) {"]
    for i in sorted(u.cached):
        if i in u.vec:
            lines += ["      " + line for line in vector_load(i, f"xc{i}[q * V + ")]
        else:
            lines += ["      #pragma unroll", "      for (int j = 0; j < V; ++j) {",
                      f"        const {u.it} r = r0 + j;", f"        xc{i}[q * V + j] = p{i}[b{i} + {u.ioff(i, 'r')}];",
                      "      }"]
    return lines + ["    }", "  }"]


def accumulate(u: Unit, st, n: int) -> tuple[list[str], list[str], list[str], tuple[list[str], list[str]]]:
    """A stage's per-thread accumulator: its declaration, the per-element update, what turns it
    into the Acc the cross-thread reduction combines, and what goes around each V elements.
    A float to double conversion costs more than a load on a GPU, so: a comparison of float
    values (max, min, argmax, argmin) stays in float (exact); a float sum adds its V elements in
    float, then once into the double accumulator; other sums and products add in double."""
    by_var = {s.var: s for s in u.k.stmts}
    value = by_var.get(st.value)
    is_float = value is not None and value.ctype == "float"
    if st.kind in INIT_F and is_float:
        return ([f"  AccF f{n} = {INIT_F[st.kind]};"],
                [f"f{n} = C_{st.kind}::c(f{n}, AccF{{{st.value}, (long long)r}});"],
                [f"  Acc a{n} = Acc{{(double)f{n}.v, f{n}.i}};"], ([], []))
    if st.kind == "sum" and is_float:
        return ([f"  Acc a{n} = {INIT[st.kind]};"], [f"q{n} += {st.value};"], [],
                ([f"float q{n} = 0.0f;"], [f"a{n}.v += (double)q{n};"]))
    return ([f"  Acc a{n} = {INIT[st.kind]};"],
            [f"a{n} = C_{st.kind}::c(a{n}, Acc{{(double)({st.value}), (long long)r}});"], [], ([], []))


def stage_result(st, n: int) -> list[str]:
    pick = "i" if st.kind.startswith("arg") else "v"
    return [f"  const {st.ctype} {st.result} = ({st.ctype})a{n}.{pick};"]


def row_stmts(u: Unit, level: int) -> list[str]:
    load = u.load(False)
    return [f"  const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in row_levels(u.k).get(level, [])]


def outputs(u: Unit) -> tuple[list[str], set[int], list[tuple[int, str]]]:
    """The full-size output values, the vectorized ones, and the per-row (operand, value) stores."""
    full = [v for i, v in u.k.stores if not u.k.operands[i].row]
    stores = {i for i, _ in u.k.stores if i in u.vec}
    rows = [(i, v) for i, v in u.k.stores if u.k.operands[i].row]
    return full, stores, rows


def head(u: Unit, params: str, shared: list[str]) -> list[str]:
    return (["template <int V>", f"__global__ void __launch_bounds__(THREADS) {u.k.name}_kernel({params}) {{"]
            + shared + pointers(u) + [f"  constexpr {u.it} kO = {u.g.O};", f"  constexpr {u.it} kL = {u.g.L};"])
