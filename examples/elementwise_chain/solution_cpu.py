"""CPU solution: the whole chain gelu(x*w+b)*sigmoid(x) fused into one OpenMP + SIMD pass.

One read of x and one write of the output per element (eager PyTorch makes five passes and
four temporaries). exp and erf are evaluated with branch-free polynomials on 16-wide GCC
vectors (AVX-512 with -march=native, split into AVX2 halves elsewhere).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Tuning space (`kcoder tune`): OpenMP scheduling of the row loop (CHUNK 0: one equal block
# per thread, as schedule(static) without a chunk).
TUNE = {"CHUNK": [0, 1, 4, 16, 64], "DYNAMIC": [0, 1]}
CONFIG = {"CHUNK": 0, "DYNAMIC": 0}
TUNE_CONSTRAINTS = ["CHUNK > 0 or not DYNAMIC"]  # dynamic without a chunk is chunk 1

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cstdint>
#include <cstring>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef float vf_u __attribute__((vector_size(64), aligned(4)));
constexpr int W = 16;

static inline vf splat(float s) { vf v = {}; return v + s; }

// exp(x) for fp32 lanes: x = n*ln2 + r, |r| <= ln2/2, degree-6 polynomial, scale by 2^n.
// Relative error ~1-2 ulp in the normal range; inputs are clamped to [-87.3, 88.0].
static inline vf vexp(vf x) {
  const vf x_in = x;
  x = x > splat(88.0f) ? splat(88.0f) : x;      // written so that NaN passes through
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  const vf magic = splat(12582912.0f);            // 1.5 * 2^23: round-to-nearest trick
  vf t = x * 1.44269504088896341f + magic;
  vf n = t - magic;
  vi ni = (vi)t - (vi)magic;
  vf r = x - n * 0.693359375f;                     // ln2 split into hi + lo
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  vi scale = (ni + 127) << 23;
  vf y = p * (vf)scale;
  return x_in < splat(-87.3f) ? splat(0.0f) : y;  // underflow (and -inf) -> 0
}

// erf(x): Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), the same approximation
// PyTorch's vectorized CPU erf uses.
static inline vf verf(vf x) {
  vf ax = x < splat(0.0f) ? -x : x;
  vf t = splat(1.0f) / (ax * 0.3275911f + 1.0f);
  vf poly = splat(1.061405429f);
  poly = poly * t + -1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t + -0.284496736f;
  poly = poly * t + 0.254829592f;
  poly = poly * t;
  vf y = splat(1.0f) - poly * vexp(-ax * ax);
  return x < splat(0.0f) ? -y : y;
}

static inline vf chain(vf x, vf w, vf b) {
  vf z = x * w + b;
  vf g = z * 0.5f * (verf(z * 0.70710678118654752f) + 1.0f);
  vf s = splat(1.0f) / (vexp(-x) + 1.0f);
  return g * s;
}

torch::Tensor elementwise_chain(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() && b.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
              b.scalar_type() == torch::kFloat32, "float32 tensors expected");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t C = x.size(-1);
  TORCH_CHECK(w.numel() == C && b.numel() == C, "weight/bias must match the last dim of x");
  auto out = torch::empty_like(x);
  const int64_t numel = x.numel();
  if (numel == 0) return out;
  const int64_t R = numel / C;
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t Cv = C - C % W;
#if CHUNK > 0 && DYNAMIC
  #pragma omp parallel for schedule(dynamic, CHUNK)
#elif CHUNK > 0
  #pragma omp parallel for schedule(static, CHUNK)
#else
  #pragma omp parallel for schedule(static)
#endif
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    float* orow = op + r * C;
    for (int64_t c = 0; c < Cv; c += W) {
      vf xv = *(const vf_u*)(xr + c);
      vf wv = *(const vf_u*)(wp + c);
      vf bv = *(const vf_u*)(bp + c);
      *(vf_u*)(orow + c) = chain(xv, wv, bv);
    }
    if (Cv < C) {
      const int64_t rem = C - Cv;
      vf xv = {}, wv = {}, bv = {};
      std::memcpy(&xv, xr + Cv, rem * sizeof(float));
      std::memcpy(&wv, wp + Cv, rem * sizeof(float));
      std::memcpy(&bv, bp + Cv, rem * sizeof(float));
      vf ov = chain(xv, wv, bv);
      std::memcpy(orow + Cv, &ov, rem * sizeof(float));
    }
  }
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
    name="elementwise_chain_cpu",
    cpp_sources=_with_config(CPP_SOURCE),
    functions=["elementwise_chain"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.elementwise_chain(x, self.weight, self.bias)
