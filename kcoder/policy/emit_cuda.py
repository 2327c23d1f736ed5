"""CUDA source for a Plan's kernels (the cuda target).

The binding (cpp_sources) checks the operands, coalesces their dims on the host (the same
code as the cpu target) and passes pointers, sizes and strides by value to a launcher in a
torch-free CUDA unit, on the current stream. Pointwise kernels: a grid-stride loop over tiles
of EPT elements per thread (`pointwise_kernel`). Row kernels take one of three layouts, chosen
from the kernel's static shape (`row_layout`): "block", one block per outer index: each reduction stage is a
thread-strided loop and a shared-memory tree reduction (index-aware for argmax/argmin, so the
first index wins as in PyTorch), then the element loop writes the outputs; "thread", one thread
per outer index running the stages sequentially, for many rows that are short or strided (a
reduction over a dim that is not the innermost: adjacent threads then read adjacent addresses);
"split", for a few very long rows with one stage and only per-row outputs (whole-tensor losses):
each row is cut into chunks reduced by blocks of their own, and the last block of a row to
finish (an atomic count) combines the partials and writes the row's outputs. Scan kernels take
"block" or "thread" by the same rule (no split: their outputs are full-size): a block scans its
row chunk by chunk (each thread EPT consecutive elements scanned in registers, a block-wide
exclusive scan of the threads' totals with warp shuffles, a running carry across chunks, all in
double as the reductions accumulate); a thread scans its row sequentially. TUNE: threads
per block and elements per thread, as -D flags on the CUDA unit only (the binding object is
reused across points). Not run in kcoder's CI (no GPU there).
"""

from __future__ import annotations

import math

from kcoder.policy.emit_common import closure, row_levels, substitute
from kcoder.policy.emit_cpu import GEOM, scan_parts, scan_step
from kcoder.policy.kernel import Kernel, Plan, Stmt

TUNE = {"THREADS": [128, 256, 512, 1024], "EPT": [1, 2, 4]}
CONFIG = {"THREADS": 256, "EPT": 1}
MAXT, MAXD = 24, 6
SPLIT_MAX_ROWS, SPLIT_MIN_LENGTH = 512, 1 << 15  # row_layout's thresholds: few, long rows
THREAD_MIN_ROWS, THREAD_MAX_LENGTH = 4096, 32  # many rows that are strided or this short
SPLIT_BLOCKS, SPLIT_MAX = 2048, 1024  # a split kernel's target block count; most chunks per row

ARGS = f"""
#define KC_MAXT {MAXT}
#define KC_MAXD {MAXD}
#define KC_SPLIT_BLOCKS {SPLIT_BLOCKS}
#define KC_SPLIT_MAX {SPLIT_MAX}
struct KArgs {{
  void* p[KC_MAXT];
  int no, ni, fast;
  long long O, L;
  long long os[KC_MAXD], is[KC_MAXD];
  long long ost[KC_MAXT][KC_MAXD], ist[KC_MAXT][KC_MAXD];
}};
"""

DEVICE = r"""
struct Acc { double v; long long i; };
__device__ __forceinline__ long long kc_base(const KArgs& a, int k, long long o) {
  long long off = 0;
  for (int d = a.no - 1; d >= 0; --d) { off += (o % a.os[d]) * a.ost[k][d]; o /= a.os[d]; }
  return off;
}
__device__ __forceinline__ long long kc_ioff(const KArgs& a, int k, long long r) {
  if (a.ni == 1) return r * a.ist[k][0];
  long long off = 0;
  for (int d = a.ni - 1; d >= 0; --d) { off += (r % a.is[d]) * a.ist[k][d]; r /= a.is[d]; }
  return off;
}
struct C_sum { __device__ static Acc c(Acc a, Acc b) { return {a.v + b.v, 0}; } };
struct C_prod { __device__ static Acc c(Acc a, Acc b) { return {a.v * b.v, 0}; } };
struct C_max { __device__ static Acc c(Acc a, Acc b) { return (b.v > a.v || b.v != b.v) ? b : a; } };
struct C_min { __device__ static Acc c(Acc a, Acc b) { return (b.v < a.v || b.v != b.v) ? b : a; } };
// NaN wins, then the larger (smaller) value, then the smaller index.
struct C_argmax { __device__ static Acc c(Acc a, Acc b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a; } };
struct C_argmin { __device__ static Acc c(Acc a, Acc b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
  return (b.v < a.v || (b.v == a.v && b.i < a.i)) ? b : a; } };
struct S_sum { __device__ static double c(double a, double b) { return a + b; } };
struct S_prod { __device__ static double c(double a, double b) { return a * b; } };
// The exclusive prefix of v over the block's threads (blockDim.x a multiple of 32), and the
// block's total in `total`: a shuffle scan per warp, then one of the warps' totals.
template <class Op>
__device__ double kc_block_scan(double v, double id, double* sh, double& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  double x = v;
  for (int s = 1; s < 32; s <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, x, s);
    if (lane >= s) x = Op::c(y, x);
  }
  if (lane == 31) sh[warp] = x;
  __syncthreads();
  if (warp == 0) {
    double w = lane < nw ? sh[lane] : id;
    for (int s = 1; s < 32; s <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, w, s);
      if (lane >= s) w = Op::c(y, w);
    }
    if (lane < nw) sh[lane] = w;
  }
  __syncthreads();
  const double before = warp ? sh[warp - 1] : id;
  total = sh[nw - 1];
  double excl = __shfl_up_sync(0xffffffffu, x, 1);
  excl = lane ? Op::c(before, excl) : before;
  __syncthreads();  // sh is reused by the next chunk
  return excl;
}
template <class Op>
__device__ Acc kc_block_reduce(Acc v, Acc* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = Op::c(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const Acc r = sh[0];
  __syncthreads();
  return r;
}
"""

_INIT = {"sum": "Acc{0.0, 0}", "prod": "Acc{1.0, 0}", "max": "Acc{-INFINITY, 0}", "min": "Acc{INFINITY, 0}",
         "argmax": "Acc{-INFINITY, 0x7fffffffffffffffLL}", "argmin": "Acc{INFINITY, 0x7fffffffffffffffLL}"}


def _load_fn(kernel: Kernel):
    def load(i: int) -> str:
        op = kernel.operands[i]
        if op.row:
            return f"p{i}[b{i}]"
        return f"p{i}[b{i} + (a.fast ? r * {op.expect} : kc_ioff(a, {i}, r))]"
    return load


def _pointers(kernel: Kernel) -> list[str]:
    lines = []
    for i, op in enumerate(kernel.operands):
        const = "" if op.output else "const "
        lines.append(f"  {const}{op.ctype}* __restrict__ p{i} = ({const}{op.ctype}*)a.p[{i}];")
    return lines


def _element(kernel: Kernel, targets: list[str], tail: list[str], indent: str) -> list[str]:
    load = _load_fn(kernel)
    out = [f"{indent}const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in closure(kernel, targets)]
    return out + [indent + substitute(t, load) for t in tail]


def _stores(kernel: Kernel) -> list[str]:
    return [f"p{i}[b{i} + (a.fast ? r : kc_ioff(a, {i}, r))] = {v};"
            for i, v in kernel.stores if not kernel.operands[i].row]


def _bases(kernel: Kernel, indent: str) -> list[str]:
    return [f"{indent}const long long b{i} = kc_base(a, {i}, o);" for i in range(len(kernel.operands))]


def pointwise_kernel(kernel: Kernel) -> list[str]:
    """Rows of at least THREADS elements: a block takes a tile of one row, so the operands' bases
    (integer divisions per outer dim) are computed once per tile and each element costs one
    multiply-add of its index; shorter rows: a flat index over all elements. In both, element e
    of a thread is e * THREADS past its first, so every load of a warp is contiguous."""
    element = _element(kernel, [v for _, v in kernel.stores], _stores(kernel), "        ")
    lines = [f"__global__ void {kernel.name}_kernel(const KArgs a) {{"] + _pointers(kernel)
    lines += ["  const long long tile = (long long)THREADS * EPT;",
              "  if (a.L >= THREADS) {",
              "    const long long per_row = (a.L + tile - 1) / tile;",
              "    for (long long t = blockIdx.x; t < a.O * per_row; t += gridDim.x) {",
              "      const long long o = t / per_row, r0 = (t % per_row) * tile + threadIdx.x;"]
    lines += _bases(kernel, "      ")
    lines += ["      #pragma unroll", "      for (int e = 0; e < EPT; ++e) {",
              "        const long long r = r0 + (long long)e * THREADS;",
              "        if (r >= a.L) break;"]
    lines += element + ["      }", "    }", "    return;", "  }"]
    lines += ["  const long long N = a.O * a.L, stride = (long long)gridDim.x * tile;",
              "  for (long long w = (long long)blockIdx.x * tile + threadIdx.x; w < N; w += stride) {",
              "    #pragma unroll", "    for (int e = 0; e < EPT; ++e) {",
              "      const long long i = w + (long long)e * THREADS;",
              "      if (i >= N) break;",
              "      const long long o = i / a.L, r = i % a.L;"]
    lines += _bases(kernel, "      ")
    lines += [line[2:] for line in element]
    return lines + ["    }", "  }", "}"]


def row_layout(kernel: Kernel) -> str:
    """block, thread or split (the module docstring says when each is used)."""
    outer = math.prod(n for d, n in enumerate(kernel.domain) if d not in kernel.dims)
    length = math.prod(kernel.domain[d] for d in kernel.dims)
    row_outputs_only = all(kernel.operands[i].row for i, _ in kernel.stores)
    if len(kernel.stages) == 1 and row_outputs_only and outer <= SPLIT_MAX_ROWS and length >= SPLIT_MIN_LENGTH:
        return "split"
    strided = len(kernel.domain) - 1 not in kernel.dims
    if outer >= THREAD_MIN_ROWS and (strided or length <= THREAD_MAX_LENGTH):
        return "thread"
    return "block"


def _row_body(kernel: Kernel, layout: str) -> list[str]:
    """The stages, row statements and stores of one row (after its bases are computed)."""
    levels, load, lines = row_levels(kernel), _load_fn(kernel), []
    first, step = ("0", "1") if layout == "thread" else ("threadIdx.x", "blockDim.x")

    def row_stmts(level: int) -> None:
        lines.extend(f"  const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in levels.get(level, []))

    row_stmts(-1)
    for n, st in enumerate(kernel.stages):
        lines += [f"  Acc a{n} = {_INIT[st.kind]};"]
        if layout == "split":  # this block's chunk of the row
            lines += ["  const long long chunk = (a.L + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * chunk;",
                      "  const long long r1 = r0 + chunk < a.L ? r0 + chunk : a.L;",
                      "  for (long long r = r0 + threadIdx.x; r < r1; r += blockDim.x) {"]
        else:
            lines += [f"  for (long long r = {first}; r < a.L; r += {step}) {{"]
        lines += _element(kernel, [st.value], [f"a{n} = C_{st.kind}::c(a{n}, Acc{{(double)({st.value}), r}});"],
                          "    ")
        lines += ["  }"]
        if layout != "thread":
            lines.append(f"  a{n} = kc_block_reduce<C_{st.kind}>(a{n}, sh);")
        if layout == "split":
            lines += _split_combine(st.kind, n)
        pick = "i" if st.kind.startswith("arg") else "v"
        lines.append(f"  const {st.ctype} {st.result} = ({st.ctype})a{n}.{pick};")
        row_stmts(n)
    full = [v for i, v in kernel.stores if not kernel.operands[i].row]
    if full:
        lines.append(f"  for (long long r = {first}; r < a.L; r += {step}) {{")
        lines += _element(kernel, full, _stores(kernel), "    ")
        lines.append("  }")
    rows = [(i, v) for i, v in kernel.stores if kernel.operands[i].row]
    if rows:
        lines.append("  {" if layout == "thread" else "  if (threadIdx.x == 0) {")
        lines += [f"    p{i}[b{i}] = {v};" for i, v in rows]
        lines.append("  }")
    return lines


def _split_combine(kind: str, n: int) -> list[str]:
    """A split row's partials: every block stores its own; the last of the row combines them."""
    return ["  __shared__ bool kc_last;",
            "  if (threadIdx.x == 0) {",
            f"    part[o * gridDim.y + blockIdx.y] = a{n};",
            "    __threadfence();  // the partial is visible before the count says so",
            "    kc_last = atomicAdd(&count[o], 1u) == gridDim.y - 1;",
            "  }",
            "  __syncthreads();",
            "  if (!kc_last) return;",
            "  __threadfence();",
            f"  a{n} = {_INIT[kind]};",
            "  for (unsigned s = threadIdx.x; s < gridDim.y; s += blockDim.x) {  // L2 reads: other blocks wrote them",
            "    const Acc* q = part + o * gridDim.y + s;",
            f"    a{n} = C_{kind}::c(a{n}, Acc{{__ldcg(&q->v), __ldcg(&q->i)}});",
            "  }",
            f"  a{n} = kc_block_reduce<C_{kind}>(a{n}, sh);"]


def _scan_element(kernel: Kernel, stmts: list[Stmt], tail: list[str], indent: str) -> list[str]:
    """`stmts` (in the element loop's scope), then `tail`, with the operands' loads substituted."""
    load = _load_fn(kernel)
    return [f"{indent}{substitute(line, load)}" for line in
            [f"const {s.ctype} {s.var} = {s.expr};" for s in stmts] + tail]


def _scan_body(kernel: Kernel, layout: str) -> list[str]:
    """A scan row: sequential in one thread, or chunk by chunk across the block (the module
    docstring says how). `r` is the element's position (from the row's end when reverse)."""
    scan = kernel.scan
    assert scan is not None and set(row_levels(kernel)) <= {-1}
    before, after = scan_parts(kernel)
    load, op = _load_fn(kernel), f"S_{scan.kind}"
    lines = [f"  const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in row_levels(kernel).get(-1, [])]
    pos = "a.L - 1 - i" if scan.reverse else "i"
    if layout == "thread":
        lines += [f"  double acc = {scan.identity};", "  for (long long i = 0; i < a.L; ++i) {",
                  f"    const long long r = {pos};"]
        lines += _scan_element(kernel, before, scan_step(kernel, "acc", scan.value), "    ")
        return lines + _scan_element(kernel, after, _stores(kernel), "    ") + ["  }"]
    # a thread's EPT elements: the value each adds (identity past the end), scanned in registers
    lines += [f"  double carry = {scan.identity};",
              "  for (long long c = 0; c < a.L; c += (long long)blockDim.x * EPT) {",
              "    double run[EPT];", f"    double acc = {scan.identity};",
              "    #pragma unroll", "    for (int e = 0; e < EPT; ++e) {",
              "      const long long i = c + (long long)threadIdx.x * EPT + e;",
              f"      double x = {scan.identity};",
              "      if (i < a.L) {", f"        const long long r = {pos};"]
    lines += _scan_element(kernel, before, [f"x = (double)({scan.value});"], "        ")
    step = ["run[e] = acc;", f"acc = {op}::c(acc, x);"] if scan.exclusive else [f"acc = {op}::c(acc, x);",
                                                                                  "run[e] = acc;"]
    lines += ["      }"] + [f"      {line}" for line in step] + ["    }"]
    lines += ["    double total;",
              f"    const double pre = {op}::c(carry, kc_block_scan<{op}>(acc, {scan.identity}, sh, total));",
              "    #pragma unroll", "    for (int e = 0; e < EPT; ++e) {",
              "      const long long i = c + (long long)threadIdx.x * EPT + e;",
              "      if (i >= a.L) break;", f"      const long long r = {pos};",
              f"      const {scan.ctype} {scan.result} = ({scan.ctype}){op}::c(pre, run[e]);"]
    again = closure(kernel, [v for _, v in kernel.stores])  # another scope: the prologue's values again
    lines += _scan_element(kernel, again, _stores(kernel), "      ")
    return lines + ["    }", f"    carry = {op}::c(carry, total);", "  }"]


def _row_head(kernel: Kernel, layout: str, shared: list[str]) -> list[str]:
    """A row kernel's signature, shared memory, pointers and its outer index `o`."""
    split = ", Acc* __restrict__ part, unsigned* __restrict__ count" if layout == "split" else ""
    params = "const KArgs a" + split
    index = (["  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;", "  if (o >= a.O) return;"]
             if layout == "thread" else ["  const long long o = blockIdx.x;"])
    return [f"__global__ void {kernel.name}_kernel({params}) {{"] + shared + _pointers(kernel) + index


def row_kernel(kernel: Kernel) -> list[str]:
    layout = row_layout(kernel)
    if kernel.scan:
        head = _row_head(kernel, layout, [] if layout == "thread" else ["  __shared__ double sh[32];"])
        return head + _bases(kernel, "  ") + _scan_body(kernel, layout) + ["}"]
    head = _row_head(kernel, layout, [] if layout == "thread" else ["  __shared__ Acc sh[THREADS];"])
    return head + _bases(kernel, "  ") + _row_body(kernel, layout) + ["}"]


def launcher(kernel: Kernel) -> list[str]:
    layout = row_layout(kernel) if kernel.dims else "pointwise"
    head = [f"cudaError_t launch_{kernel.name}({_launch_params(layout)}) {{",
            "  if (a.O * a.L == 0) return cudaSuccess;"]
    if layout == "split":  # enough blocks to fill the GPU, each with at least a few elements per thread
        return head + ["  const long long want = (KC_SPLIT_BLOCKS + a.O - 1) / a.O;",
                       "  const long long most = (a.L + (long long)THREADS * 4 - 1) / ((long long)THREADS * 4);",
                       "  const unsigned s = (unsigned)std::max<long long>(1, std::min<long long>("
                       "std::min(want, most), KC_SPLIT_MAX));",
                       f"  {kernel.name}_kernel<<<dim3((unsigned)a.O, s), THREADS, 0, stream>>>"
                       "(a, (Acc*)part, (unsigned*)count);",
                       "  return cudaGetLastError();", "}"]
    grid = {"block": "(unsigned)(a.O > 0x7fffffffLL ? 0x7fffffffLL : a.O)",
            "thread": "(unsigned)((a.O + THREADS - 1) / THREADS)",
            "pointwise": "(unsigned)std::min<long long>(a.L >= THREADS ? a.O * ((a.L + tile - 1) / tile) : "
                         "(a.O * a.L + tile - 1) / tile, 1LL << 20)"}[layout]
    if layout == "pointwise":
        head.append("  const long long tile = (long long)THREADS * EPT;")
    return head + [f"  {kernel.name}_kernel<<<{grid}, THREADS, 0, stream>>>(a);",
                   "  return cudaGetLastError();", "}"]


def _launch_params(layout: str) -> str:
    extra = ", void* part, void* count" if layout == "split" else ""
    return f"const KArgs& a{extra}, cudaStream_t stream"


def binding(kernel: Kernel) -> list[str]:
    n = len(kernel.operands)
    expect = ", ".join(str(-1 if op.row else op.expect) for op in kernel.operands)
    split = bool(kernel.dims) and row_layout(kernel) == "split"
    layout = "split" if split else "other"
    # a split row's scratch: KC_SPLIT_MAX partials of 16 bytes per row and a zeroed count per row
    scratch = ["  auto part = torch::empty({g.O * KC_SPLIT_MAX * 2}, t[0].options().dtype(torch::kFloat64));",
               "  auto count = torch::zeros({g.O}, t[0].options().dtype(torch::kInt32));"] if split else []
    call = ("a, part.data_ptr(), count.data_ptr(), " if split else "a, ") + "c10::cuda::getCurrentCUDAStream().stream()"
    return [f"cudaError_t launch_{kernel.name}({_launch_params(layout)});",
            f"void {kernel.name}(std::vector<torch::Tensor> t) {{",
            f"  TORCH_CHECK(t.size() == {n} && t.size() <= KC_MAXT, \"{kernel.name}: wrong operand count\");",
            "  TORCH_CHECK(t[0].is_cuda(), \"CUDA tensors expected\");",
            f"  const kc::Geom g(t, {len(kernel.dims)});",
            "  TORCH_CHECK(g.os.size() <= KC_MAXD && g.is.size() <= KC_MAXD, \"too many dims\");",
            "  KArgs a{};",
            f"  static const int expect[] = {{{expect}}};",
            "  a.no = (int)g.os.size(); a.ni = (int)g.is.size(); a.fast = g.fast(expect); a.O = g.O; a.L = g.L;",
            "  for (int d = 0; d < a.no; ++d) a.os[d] = g.os[d];",
            "  for (int d = 0; d < a.ni; ++d) a.is[d] = g.is[d];",
            f"  for (int k = 0; k < {n}; ++k) {{",
            "    a.p[k] = t[k].data_ptr();",
            "    for (int d = 0; d < a.no; ++d) a.ost[k][d] = g.ost[k][d];",
            "    for (int d = 0; d < a.ni; ++d) a.ist[k][d] = g.ist[k][d];",
            "  }",
            "  const c10::cuda::CUDAGuard guard(t[0].device());", *scratch,
            f"  C10_CUDA_CHECK(launch_{kernel.name}({call}));",
            "}"]


def render_cuda(plan: Plan) -> tuple[str, str]:
    """(cpp_sources, cuda_sources) for the plan's kernels."""
    cpp = ["#include <torch/extension.h>", "#include <c10/cuda/CUDAStream.h>", "#include <c10/cuda/CUDAGuard.h>",
           "#include <c10/cuda/CUDAException.h>",
           "#include <vector>", GEOM, ARGS]
    cuda = ["#include <cuda_runtime.h>", "#include <math.h>", "#include <algorithm>", "#include <cstdint>",
            ARGS, DEVICE]
    for kernel in plan.kernels:
        cpp.append("\n".join(binding(kernel)) + "\n")
        body = row_kernel(kernel) if kernel.dims else pointwise_kernel(kernel)
        cuda.append("\n".join(body + launcher(kernel)) + "\n")
    return "\n".join(cpp), "\n".join(cuda)
