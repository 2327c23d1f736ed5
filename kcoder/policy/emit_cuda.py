"""CUDA source for a Plan's kernels (the cuda target), specialized to the shapes the capture saw.

Every kernel is rendered for its operands' sizes and strides (geometry.py: forward run on meta
tensors), coalesced as the kernels index them. Sizes and strides are literals, so index math
folds into multiply-shifts, and 32-bit when every offset fits. The binding (cpp_sources) checks
the real operands against those sizes, strides and dtypes and names any difference.

Layouts, chosen from the static shape (`row_layout`):
- pointwise: one flat index over the domain, VEC (4) consecutive elements per thread with
  128-bit loads/stores for contiguous float operands when rows allow it and the pointers are
  aligned (checked at call time; otherwise the scalar instance), UNROLL vectors per thread.
- "warp": many short contiguous rows, a warp per row (THREADS/32 rows per block), shuffles only.
- "block": a block per row; each stage a vectorized loop and a warp-shuffle block reduction.
- "column": many strided rows (a reduction over a dim that is not the innermost, e.g. dim 1 of
  [B, R, C]): 32 adjacent rows a block, a lane each, and the block's kY = THREADS/32 warps
  splitting each row's elements (UNROLL * 4 loads in flight each), then the kY partials combined
  through shared memory: every warp load is 32 adjacent addresses, and the work comes in blocks
  short enough to balance over the SMs (a thread walking a whole 4096-element row did not).
- "thread": many tiny rows (pooling windows, rows of at most 32, strided or not): a thread per
  row, adjacent threads reading adjacent addresses where the rows are strided.
- "split": few long rows: each row cut into chunks over gridDim.y, one launch per reduction
  stage (each block's partial, then the row's last block combines them, an atomic count saying
  which) and one launch for the full-size outputs, so a few rows still fill the GPU.
- "cluster": rows passed over more than once, too long for registers, many enough to fill the
  GPU: each row over a cluster of up to 8 blocks holding it in shared memory, read from memory
  once (cuda_cluster.py); the block-per-row kernel where such a cluster cannot be resident.
Softmax-like max-then-sum(exp(x - max)) stage pairs run as one online pass (stages.py) where
the row is read from memory for each pass; a row on chip (registers, shared memory) takes two
plain passes, which cost fewer instructions.
Scans: a warp per row for many long contiguous rows, else a block per row chunk by chunk, or a
thread per strided row (emit_cuda_scan.py).
TUNE: threads per block and the unroll factor, as -D flags on the CUDA unit only; a candidate
declares only the knobs its kernels use (a persistent row reads registers: no UNROLL), so every
point of its space is different code.
"""

from __future__ import annotations

from kcoder.policy.batchdims import BATCH_SETTER, BATCH_VAR
from kcoder.policy.cuda_cluster import cluster_kernel, cluster_launch
from kcoder.policy.cuda_device import HELPERS, INT_SPAN
from kcoder.policy.cuda_kernels import pointwise_kernel, row_kernel, split_kernels
from kcoder.policy.cuda_unit import SPLIT_MAX, Choices, Unit, row_layout
from kcoder.policy.emit_cuda_scan import scan_kernel, warp_scan_kernel
from kcoder.policy.geometry import kernel_geometry
from kcoder.policy.graph import Graph
from kcoder.policy.kernel import Plan

__all__ = ["TUNE", "CONFIG", "render_cuda", "row_layout", "tune_config", "tune_space"]
TUNE = {"THREADS": [128, 256, 512], "UNROLL": [1, 2, 4]}
CONFIG = {"THREADS": 256, "UNROLL": 2}


SCALAR = {"float": "at::kFloat", "int64_t": "at::kLong", "bool": "at::kBool", "int32_t": "at::kInt"}


def launcher(u: Unit) -> list[str]:
    k, lay = u.k, u.layout
    params = "const KPtrs& a, bool vec, void* part, void* count, void* res, cudaStream_t stream"
    lines = [f"cudaError_t launch_{k.name}({params}) {{"]
    if u.g.O * u.g.L == 0:
        return lines + ["  return cudaSuccess;", "}"]
    # a constant here; a run-time check in a candidate for any batch size (an empty batch: no grid)
    lines.append(f"  if ({u.g.O * u.g.L}LL == 0) return cudaSuccess;")
    grid = {"pointwise": f"(unsigned)(({u.g.O * u.g.L}LL + THREADS * V * UNROLL - 1) / (THREADS * V * UNROLL))",
            "block": f"{u.g.O}u", "warp": f"(unsigned)(({u.g.O}LL + THREADS / 32 - 1) / (THREADS / 32))",
            "thread": f"(unsigned)(({u.g.O}LL + THREADS - 1) / THREADS)",
            "column": f"(unsigned)(({u.g.O}LL + 31) / 32)"}
    variants = [4, 1] if u.vec else [1]
    for v in variants:
        cond = "  if (vec) {" if v == 4 else ("  } else {" if u.vec else "  {")
        lines.append(cond)
        if lay == "cluster":
            lines += cluster_launch(u, v, "    ")
        elif lay == "split":
            phases = len(k.stages) + (1 if any(not k.operands[i].row for i, _ in k.stores) else 0)
            for ph in range(phases):
                lines.append(f"    {k.name}_p{ph}<{v}><<<dim3({u.g.O}u, {k.name}_Y), THREADS, 0, stream>>>"
                             "(a, (Acc*)part, (unsigned*)count, (Acc*)res);")
        else:
            lines.append(f"    constexpr int V = {v};")
            lines.append(f"    {k.name}_kernel<V><<<{grid[lay]}, THREADS, 0, stream>>>(a);")
    return lines + ["  }", "  return cudaGetLastError();", "}"]


def _c_list(values) -> str:
    return "{" + ", ".join(f"{int(v)}LL" for v in values) + "}"


def binding(u: Unit, batch: bool = False) -> list[str]:
    """The C++ entry point: operands checked against the generated sizes, strides and dtypes
    (a clear error, never a wrong read), pointers, alignment for the vector path, scratch.
    batch: the kernels read the run-time batch (a candidate for any batch size, cuda_batch.py)."""
    k, g, n = u.k, u.g, len(u.k.operands)
    split = u.layout == "split"
    ns = max(1, len(k.stages))
    f64, i32 = "t[0].options().dtype(torch::kFloat64)", "t[0].options().dtype(torch::kInt32)"
    scratch = [f"  auto part = torch::empty({{{g.O * SPLIT_MAX * 2}}}, {f64});",
               f"  auto count = torch::zeros({{{g.O * ns}}}, {i32});",
               f"  auto res = torch::empty({{{g.O * ns * 2}}}, {f64});"] if split else []
    ptrs = "part.data_ptr(), count.data_ptr(), res.data_ptr()" if split else "nullptr, nullptr, nullptr"
    aligned = " && ".join(f"reinterpret_cast<uintptr_t>(a.p[{i}]) % 16 == 0" for i in sorted(u.vec)) or "false"
    return [f"cudaError_t launch_{k.name}(const KPtrs& a, bool vec, void* part, void* count, void* res, "
            "cudaStream_t stream);",
            f"void {k.name}(std::vector<torch::Tensor> t) {{",
            f"  TORCH_CHECK(t.size() == {n}, \"{k.name}: expected {n} operands, got \", t.size());",
            f"  static const std::vector<int64_t> sizes = {_c_list(g.sizes)};",
            "  static const std::vector<std::vector<int64_t>> strides = "
            f"{{{', '.join(_c_list(s) for s in g.strides)}}};",
            f"  static const at::ScalarType types[] = {{{', '.join(SCALAR[op.ctype] for op in k.operands)}}};",
            f"  for (size_t k = 0; k < {n}; ++k) {{",
            "    TORCH_CHECK(t[k].is_cuda() && t[k].device() == t[0].device(), "
            f"\"{k.name}: operand \", k, \" is not a CUDA tensor on the first operand's device\");",
            f"    TORCH_CHECK(t[k].scalar_type() == types[k], \"{k.name}: operand \", k, \" is \", "
            "t[k].scalar_type(), \", generated for \", types[k]);",
            "    bool same = t[k].sizes() == c10::IntArrayRef(sizes);",
            "    for (size_t d = 0; same && d < sizes.size(); ++d)",
            "      same = sizes[d] == 1 || t[k].stride(d) == strides[k][d];",
            f"    TORCH_CHECK(same, \"{k.name}: operand \", k, \" has sizes \", t[k].sizes(), \" and strides \", "
            "t[k].strides(), \"; this kernel was generated for sizes \", c10::IntArrayRef(sizes), \" and strides \", "
            "c10::IntArrayRef(strides[k]), \" (the shapes the capture saw): generate it again for other shapes\");",
            "  }",
            *span_check(u),
            "  KPtrs a{};", *([f"  a.batch = {BATCH_VAR};"] if batch else []),
            f"  for (size_t k = 0; k < {n}; ++k) a.p[k] = t[k].data_ptr();",
            f"  const bool vec = {aligned};",
            "  const c10::cuda::CUDAGuard guard(t[0].device());", *scratch,
            f"  C10_CUDA_CHECK(launch_{k.name}(a, vec, {ptrs}, c10::cuda::getCurrentCUDAStream().stream()));",
            "}"]


def span_check(u: Unit) -> list[str]:
    """32-bit offsets hold the operands' reach: a constant check here, a run-time one once
    cuda_batch.py has written the reach in terms of the batch."""
    if u.it != "int":
        return []
    return [f"  TORCH_CHECK({u.g.span()}LL < {INT_SPAN}LL, \"{u.k.name}: its operands reach past the 32-bit offsets "
            "it was generated with: generate it again for this size\");"]


def units(plan: Plan, graph: Graph, fixed: dict[str, Choices] | None = None) -> list[Unit]:
    """Each kernel with its geometry; fixed: the choices (Unit.choices) made at another batch size,
    by kernel name (a candidate for any batch size renders every traced size with the problem's)."""
    geometry = kernel_geometry(plan, graph)
    out = []
    for kernel in plan.kernels:
        if kernel.name not in geometry:
            raise ValueError(f"{kernel.name}: its operands' shapes could not be determined from forward")
        if len(kernel.operands) > MAXT:
            raise ValueError(f"{kernel.name}: {len(kernel.operands)} operands (at most {MAXT})")
        out.append(Unit(kernel, geometry[kernel.name], fixed=(fixed or {}).get(kernel.name)))
    return out


MAXT = 24


PTRS = f"struct KPtrs {{ void* p[{MAXT}]; long long batch; }};\n"
# In the CUDA unit the batch is the kernels' (and launchers') argument `a`'s, under the name the
# C++ unit's global has: an expression of it reads the same in both (cuda_batch.py).
BATCH_IN_KERNELS = f"#define {BATCH_VAR} (a.batch)\n"


def render_cuda(plan: Plan, graph: Graph, batch: bool = False,
                fixed: dict[str, Choices] | None = None) -> tuple[str, str]:
    """(cpp_sources, cuda_sources) for the plan's kernels; batch: forward sets the run-time batch
    (BATCH_SETTER) and the kernels get it (a candidate for any batch size); fixed: units()'s."""
    cpp = ["#include <torch/extension.h>", "#include <c10/cuda/CUDAStream.h>", "#include <c10/cuda/CUDAGuard.h>",
           "#include <c10/cuda/CUDAException.h>", "#include <cstdint>", "#include <vector>", PTRS]
    cuda = ["#include <cuda_runtime.h>", "#include <math.h>", "#include <algorithm>", "#include <cstdint>",
            PTRS, HELPERS]
    if batch:
        cpp.append(BATCH_SETTER)
        cuda.append(BATCH_IN_KERNELS)
    for u in units(plan, graph, fixed):
        cpp.append("\n".join(binding(u, batch)) + "\n")
        if u.k.scan:
            body = warp_scan_kernel(u) if u.layout == "warp" else scan_kernel(u)
        elif u.layout == "pointwise":
            body = pointwise_kernel(u)
        elif u.layout == "split":
            body = split_kernels(u)
        elif u.layout == "cluster":  # with the block-per-row kernel, for a device it does not fit
            body = row_kernel(Unit(u.k, u.g, fixed=Choices("block", u.it))) + cluster_kernel(u)
        else:
            body = row_kernel(u)
        cuda.append("\n".join(body + launcher(u)) + "\n")
    return "\n".join(cpp), "\n".join(cuda)


def tune_space(cuda: str) -> dict[str, list[int]]:
    """TUNE for a rendered CUDA unit: the knobs its kernels read."""
    return {name: values for name, values in TUNE.items() if name == "THREADS" or name in cuda}


def tune_config(cuda: str) -> dict[str, int]:
    """CONFIG for a rendered CUDA unit: the default of each knob tune_space declares (the tune
    tool refuses a CONFIG that names a knob TUNE does not)."""
    return {name: value for name, value in CONFIG.items() if name in tune_space(cuda)}
