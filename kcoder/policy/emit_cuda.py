"""CUDA source for a Plan's kernels (the cuda target).

The binding (cpp_sources) checks the operands, coalesces their dims on the host (the same
code as the cpu target) and passes pointers, sizes and strides by value to a launcher in a
torch-free CUDA unit, on the current stream. Pointwise kernels: a grid-stride loop, EPT
elements per thread. Row kernels: one block per outer index; each reduction stage is a
thread-strided loop and a shared-memory tree reduction (index-aware for argmax/argmin, so
the first index wins as in PyTorch), then the element loop writes the outputs. TUNE: threads
per block and elements per thread, as -D flags on the CUDA unit only (the binding object is
reused across points). Not run in kcoder's CI (no GPU there).
"""

from __future__ import annotations

from kcoder.policy.emit_common import closure, row_levels, substitute
from kcoder.policy.emit_cpu import GEOM
from kcoder.policy.kernel import Kernel, Plan

TUNE = {"THREADS": [128, 256, 512, 1024], "EPT": [1, 2, 4]}
CONFIG = {"THREADS": 256, "EPT": 1}
MAXT, MAXD = 24, 6

ARGS = f"""
#define KC_MAXT {MAXT}
#define KC_MAXD {MAXD}
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
    lines = [f"__global__ void {kernel.name}_kernel(const KArgs a) {{"] + _pointers(kernel)
    lines += ["  const long long N = a.O * a.L;",
              "  const long long step = (long long)gridDim.x * blockDim.x * EPT;",
              "  for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * EPT; w < N; w += step) {",
              "    #pragma unroll",
              "    for (int e = 0; e < EPT; ++e) {",
              "      if (w + e >= N) break;",
              "      const long long o = (w + e) / a.L, r = (w + e) % a.L;"]
    lines += _bases(kernel, "      ")
    lines += _element(kernel, [v for _, v in kernel.stores], _stores(kernel), "      ")
    return lines + ["    }", "  }", "}"]


def row_kernel(kernel: Kernel) -> list[str]:
    levels = row_levels(kernel)
    load = _load_fn(kernel)
    lines = [f"__global__ void {kernel.name}_kernel(const KArgs a) {{", "  __shared__ Acc sh[THREADS];"]
    lines += _pointers(kernel) + ["  const long long o = blockIdx.x;"] + _bases(kernel, "  ")

    def row_stmts(level: int) -> None:
        lines.extend(f"  const {s.ctype} {s.var} = {substitute(s.expr, load)};" for s in levels.get(level, []))

    row_stmts(-1)
    for n, st in enumerate(kernel.stages):
        lines += [f"  Acc a{n} = {_INIT[st.kind]};",
                  "  for (long long r = threadIdx.x; r < a.L; r += blockDim.x) {"]
        lines += _element(kernel, [st.value], [f"a{n} = C_{st.kind}::c(a{n}, Acc{{(double)({st.value}), r}});"],
                          "    ")
        lines += ["  }", f"  a{n} = kc_block_reduce<C_{st.kind}>(a{n}, sh);"]
        pick = "i" if st.kind.startswith("arg") else "v"
        lines.append(f"  const {st.ctype} {st.result} = ({st.ctype})a{n}.{pick};")
        row_stmts(n)
    full = [v for i, v in kernel.stores if not kernel.operands[i].row]
    if full:
        lines.append("  for (long long r = threadIdx.x; r < a.L; r += blockDim.x) {")
        lines += _element(kernel, full, _stores(kernel), "    ")
        lines.append("  }")
    rows = [(i, v) for i, v in kernel.stores if kernel.operands[i].row]
    if rows:
        lines.append("  if (threadIdx.x == 0) {")
        lines += [f"    p{i}[b{i}] = {v};" for i, v in rows]
        lines.append("  }")
    return lines + ["}"]


def launcher(kernel: Kernel) -> list[str]:
    grid = ("(unsigned)(a.O > 0x7fffffffLL ? 0x7fffffffLL : a.O)" if kernel.dims else
            "(unsigned)std::min<long long>((a.O * a.L + (long long)THREADS * EPT - 1) / ((long long)THREADS * EPT), "
            "1LL << 20)")
    return [f"cudaError_t launch_{kernel.name}(const KArgs& a, cudaStream_t stream) {{",
            "  if (a.O * a.L == 0) return cudaSuccess;",
            f"  {kernel.name}_kernel<<<{grid}, THREADS, 0, stream>>>(a);",
            "  return cudaGetLastError();", "}"]


def binding(kernel: Kernel) -> list[str]:
    n = len(kernel.operands)
    expect = ", ".join(str(-1 if op.row else op.expect) for op in kernel.operands)
    return [f"cudaError_t launch_{kernel.name}(const KArgs& a, cudaStream_t stream);",
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
            "  const c10::cuda::CUDAGuard guard(t[0].device());",
            f"  C10_CUDA_CHECK(launch_{kernel.name}(a, c10::cuda::getCurrentCUDAStream().stream()));",
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
