"""CPU solution: row softmax with OpenMP over rows and 16-wide SIMD inside each row.

Per row: one vector max pass, one pass that writes exp(x - max) and accumulates the sum,
one in-cache pass that scales by 1/sum. A row (16 KB at 4096 columns) stays in L1/L2, so
main memory sees one read and one write per element. exp is a branch-free polynomial.
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
#include <limits>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef float vf_u __attribute__((vector_size(64), aligned(4)));
constexpr int W = 16;

static inline vf splat(float s) { vf v = {}; return v + s; }

// exp(x) for fp32 lanes (Cephes expf polynomial): ~1-2 ulp; inputs clamped to [-87.3, 88].
static inline vf vexp(vf x) {
  const vf x_in = x;
  x = x > splat(88.0f) ? splat(88.0f) : x;      // written so that NaN passes through
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  const vf magic = splat(12582912.0f);
  vf t = x * 1.44269504088896341f + magic;
  vf n = t - magic;
  vi ni = (vi)t - (vi)magic;
  vf r = x - n * 0.693359375f;
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

static inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < W; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
static inline float hsum(vf v) {
  float s = 0.0f;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

static void softmax_row(const float* x, float* y, int64_t C) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t Cv = C - C % W;
  const int64_t rem = C - Cv;
  // pass 1: max
  vf m0 = splat(ninf), m1 = splat(ninf);
  int64_t c = 0;
  for (; c + 2 * W <= Cv; c += 2 * W) {
    vf a = *(const vf_u*)(x + c), b = *(const vf_u*)(x + c + W);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
  }
  for (; c < Cv; c += W) {
    vf a = *(const vf_u*)(x + c);
    m0 = a > m0 ? a : m0;
  }
  m0 = m1 > m0 ? m1 : m0;
  float mx = hmax(m0);
  for (int64_t j = Cv; j < C; ++j) mx = x[j] > mx ? x[j] : mx;
  if (mx == ninf) mx = 0.0f;  // all -inf row: exp(-inf - 0) = 0, sum 0 -> NaN like PyTorch
  const vf mv = splat(mx);
  // pass 2: e = exp(x - max), sum
  vf s0 = {}, s1 = {};
  c = 0;
  for (; c + 2 * W <= Cv; c += 2 * W) {
    vf a = vexp(*(const vf_u*)(x + c) - mv);
    vf b = vexp(*(const vf_u*)(x + c + W) - mv);
    *(vf_u*)(y + c) = a;
    *(vf_u*)(y + c + W) = b;
    s0 += a;
    s1 += b;
  }
  for (; c < Cv; c += W) {
    vf a = vexp(*(const vf_u*)(x + c) - mv);
    *(vf_u*)(y + c) = a;
    s0 += a;
  }
  float sum = hsum(s0 + s1);
  if (rem) {
    vf a = splat(ninf);
    std::memcpy(&a, x + Cv, rem * sizeof(float));
    vf e = vexp(a - mv);
    for (int64_t j = 0; j < rem; ++j) { y[Cv + j] = e[j]; sum += e[j]; }
  }
  // pass 3: scale (row is in cache)
  const float inv = 1.0f / sum;
  const vf iv = splat(inv);
  for (c = 0; c < Cv; c += W) *(vf_u*)(y + c) = *(const vf_u*)(y + c) * iv;
  for (int64_t j = Cv; j < C; ++j) y[j] *= inv;
}

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "CPU tensor expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 tensor expected");
  TORCH_CHECK(x.is_contiguous(), "contiguous tensor expected");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  auto out = torch::empty_like(x);
  const int64_t C = x.size(-1);
  if (x.numel() == 0) return out;
  const int64_t R = x.numel() / C;
  const float* xp = x.data_ptr<float>();
  float* yp = out.data_ptr<float>();
#if CHUNK > 0 && DYNAMIC
  #pragma omp parallel for schedule(dynamic, CHUNK)
#elif CHUNK > 0
  #pragma omp parallel for schedule(static, CHUNK)
#else
  #pragma omp parallel for schedule(static)
#endif
  for (int64_t r = 0; r < R; ++r) softmax_row(xp + r * C, yp + r * C, C);
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
    name="softmax_rows_cpu",
    cpp_sources=_with_config(CPP_SOURCE),
    functions=["softmax_rows"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_rows(x)
