"""CPU solution: mean((a - b)**2) as one fused OpenMP + SIMD reduction pass.

Reads a and b once with no temporaries (eager PyTorch writes and rereads two 64 MB
intermediates). Each 4096-element block is summed in fp32 across 64 SIMD lanes, block sums
are accumulated in double per thread, so the result is more accurate than a plain fp32 sum.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Tuning space (`kcoder tune`): elements per OpenMP work item and the schedule's chunk.
TUNE = {"BLOCK_ELEMS": [1024, 2048, 4096, 8192, 16384], "CHUNK": [0, 1, 4]}
CONFIG = {"BLOCK_ELEMS": 4096, "CHUNK": 0}

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cstdint>

typedef float vf __attribute__((vector_size(64)));
typedef float vf_u __attribute__((vector_size(64), aligned(4)));
constexpr int64_t W = 16;
constexpr int64_t BLOCK = BLOCK_ELEMS;  // multiple of 4 * W

static inline double block_sum(const float* a, const float* b, int64_t n) {
  vf s0 = {}, s1 = {}, s2 = {}, s3 = {};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    vf d0 = *(const vf_u*)(a + i) - *(const vf_u*)(b + i);
    vf d1 = *(const vf_u*)(a + i + W) - *(const vf_u*)(b + i + W);
    vf d2 = *(const vf_u*)(a + i + 2 * W) - *(const vf_u*)(b + i + 2 * W);
    vf d3 = *(const vf_u*)(a + i + 3 * W) - *(const vf_u*)(b + i + 3 * W);
    s0 += d0 * d0;
    s1 += d1 * d1;
    s2 += d2 * d2;
    s3 += d3 * d3;
  }
  vf s = (s0 + s1) + (s2 + s3);
  double acc = 0.0;
  for (int k = 0; k < W; ++k) acc += (double)s[k];
  for (; i < n; ++i) {
    float d = a[i] - b[i];
    acc += (double)(d * d);
  }
  return acc;
}

torch::Tensor mse_loss(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 tensors expected");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
  const int64_t n = a.numel();
  const float* ap = a.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  const int64_t nblocks = (n + BLOCK - 1) / BLOCK;
  double total = 0.0;
#if CHUNK > 0
  #pragma omp parallel for schedule(static, CHUNK) reduction(+ : total)
#else
  #pragma omp parallel for schedule(static) reduction(+ : total)
#endif
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t start = blk * BLOCK;
    const int64_t len = (n - start) < BLOCK ? (n - start) : BLOCK;
    total += block_sum(ap + start, bp + start, len);
  }
  auto out = torch::empty({}, a.options());
  // mean of an empty tensor is NaN, as in PyTorch (0.0 / 0.0)
  out.data_ptr<float>()[0] = (float)(total / (double)n);
  return out;
}
"""


def _with_config(source: str) -> str:
    """CONFIG as #define lines after the source's leading #include block: what -D flags would
    do, while the compile flags (and so kcoder's precompiled torch header) stay the same for
    every tuning point. `kcoder tune` rewrites only the CONFIG line."""
    lines = source.splitlines(keepends=True)
    body = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#include"))
    defines = "".join(f"#define {name} {int(value)}\n" for name, value in CONFIG.items())
    return "".join(lines[:body]) + defines + "".join(lines[body:])


_ext = load_inline(
    name="mse_loss_cpu",
    cpp_sources=_with_config(CPP_SOURCE),
    functions=["mse_loss"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _ext.mse_loss(a, b)
