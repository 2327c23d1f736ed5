"""CUDA solution: relu(x @ W^T + b) as a tiled shared-memory SIMT fp32 GEMM (FFMA only, no
tensor cores / TF32) with the bias + ReLU epilogue fused into the store.

Each block computes a BM x BN tile of the output; each thread an 8 x 8 register tile
(64 accumulators), split into 4 x 4 quadrants so that its shared-memory reads are
conflict-free float4 loads. K is walked in steps of BK = 8 with double-buffered shared
memory and register prefetch of the next global tile, so global loads overlap the FFMAs and
only one __syncthreads is needed per step. x (M x K) and W (N x K) are both K-contiguous;
tiles are loaded as float4 along K and written transposed to shared memory (padded rows,
no bank conflicts). Tile size is picked per shape so the grid fills the 132 SMs:
128x128 (256 threads) for big outputs, 128x64 (8x8 per thread) or 64x64 (4x4 per thread)
with sliced K otherwise. All M/N/K tails are handled with guarded, zero-filled loads and
guarded stores; a scalar-load variant covers K % 4 != 0 or unaligned pointers.

Small grids (the 1024 x 1024 output here has only 64 tiles of 128 x 128 for 132 SMs) use
"sliced K": two thread groups per block each walk half of K on their own shared-memory
buffers for the same output tile, and their partial tiles are added through shared memory
before the epilogue. That doubles the warps per SM without a second kernel or atomics.

cuda_sources is plain CUDA (kernels and a raw-pointer launcher, no torch headers) and
cpp_sources is the torch binding layer (checks, device guard, allocation, stream, launch).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Tuning space (`kcoder tune`): CONFIG reaches the CUDA unit as -D flags (the binding unit's
# flags do not change, so every point reuses its object); tuning rewrites only the CONFIG line.
# TILE 0: the heuristic below; 1: 128x128; 2: 128x64, two K groups; 3: 64x64, two K groups
TUNE = {"TILE": [0, 1, 2, 3]}
CONFIG = {"TILE": 0}

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>
#include <vector>

cudaError_t launch_linear_bias_relu(const float* x, const float* w, const float* bias, float* out,
                                    int64_t m, int64_t n, int64_t k, cudaStream_t stream);

torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
  const c10::cuda::CUDAGuard device_guard(x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
              bias.scalar_type() == torch::kFloat32, "float32 tensors expected");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2, "bad ranks");
  const int64_t K = x.size(-1);
  const int64_t N = weight.size(0);
  TORCH_CHECK(weight.size(1) == K && bias.numel() == N, "shape mismatch");
  int64_t M = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) M *= x.size(d);
  TORCH_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "dimension too large");
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  out_sizes.back() = N;
  auto out = torch::empty(out_sizes, x.options());
  if (out.numel() == 0) return out;
  const cudaError_t err = launch_linear_bias_relu(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
      M, N, K, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_CHECK(err);
  return out;
}
"""

CUDA_SOURCE = r"""
#ifndef TILE
#define TILE 0
#endif
#include <cuda_runtime.h>
#include <cstdint>

// C[M,N] = relu(A[M,K] * B[N,K]^T + bias[N]); all row-major, fp32.
// SK thread groups ("sliced K") share one output tile: group g walks its own contiguous
// share of K with its own shared-memory buffers, then the partial tiles are summed through
// shared memory before the epilogue. SK = 2 doubles the warps per SM for small grids.
template <int BM, int BN, int BK, int TM, int TN, int SK, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN) * SK)
sgemm_bias_relu_kernel(const float* __restrict__ A, const float* __restrict__ B,
                       const float* __restrict__ bias, float* __restrict__ C,
                       int M, int N, int K) {
  constexpr int NT = (BM / TM) * (BN / TN);   // threads per K group
  constexpr int TX = BN / TN;                 // threads along N
  constexpr int KQ = BK / 4;                  // float4 per tile row along K
  constexpr int A_LD = (BM * KQ) / NT;        // float4 loads per thread for the A tile
  constexpr int B_LD = (BN * KQ) / NT;
  static_assert((BM * KQ) % NT == 0 && (BN * KQ) % NT == 0, "tile/threads mismatch");
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "4-wide fragments");
  constexpr int MQ = TM / 4, NQ = TN / 4;     // 4-wide quadrants per thread
  constexpr int MS = BM / MQ, NS = BN / NQ;   // distance between a thread's quadrants
  constexpr int APAD = BM + 4, BPAD = BN + 4; // padding: conflict-free transposed stores
  constexpr int A_BUF = BK * APAD, B_BUF = BK * BPAD;
  constexpr int TILE_FLOATS = SK * 2 * (A_BUF + B_BUF);
  constexpr int RED_FLOATS = SK > 1 ? (SK - 1) * BM * BN : 0;
  constexpr int SMEM_FLOATS = TILE_FLOATS > RED_FLOATS ? TILE_FLOATS : RED_FLOATS;
  __shared__ __align__(16) float smem[SMEM_FLOATS];

  const int g = threadIdx.x / NT;             // K group
  const int tid = threadIdx.x % NT;           // thread id inside the group
  const int tx = tid % TX, ty = tid / TX;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float* As = smem + g * 2 * (A_BUF + B_BUF); // [2][BK][APAD]
  float* Bs = As + 2 * A_BUF;                 // [2][BK][BPAD]

  float4 ra[A_LD], rb[B_LD];

  auto load_global = [&](int k0) {
    #pragma unroll
    for (int i = 0; i < A_LD; ++i) {
      const int f = tid + i * NT, r = f / KQ, kk = (f % KQ) * 4;
      const int gm = m0 + r, gk = k0 + kk;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gm < M) {
        const float* p = A + (int64_t)gm * K + gk;
        if (VEC) {
          if (gk < K) v = __ldg(reinterpret_cast<const float4*>(p));
        } else {
          if (gk < K) v.x = __ldg(p);
          if (gk + 1 < K) v.y = __ldg(p + 1);
          if (gk + 2 < K) v.z = __ldg(p + 2);
          if (gk + 3 < K) v.w = __ldg(p + 3);
        }
      }
      ra[i] = v;
    }
    #pragma unroll
    for (int i = 0; i < B_LD; ++i) {
      const int f = tid + i * NT, r = f / KQ, kk = (f % KQ) * 4;
      const int gn = n0 + r, gk = k0 + kk;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gn < N) {
        const float* p = B + (int64_t)gn * K + gk;
        if (VEC) {
          if (gk < K) v = __ldg(reinterpret_cast<const float4*>(p));
        } else {
          if (gk < K) v.x = __ldg(p);
          if (gk + 1 < K) v.y = __ldg(p + 1);
          if (gk + 2 < K) v.z = __ldg(p + 2);
          if (gk + 3 < K) v.w = __ldg(p + 3);
        }
      }
      rb[i] = v;
    }
  };
  auto store_shared = [&](int buf) {
    float* as = As + buf * A_BUF;
    float* bs = Bs + buf * B_BUF;
    #pragma unroll
    for (int i = 0; i < A_LD; ++i) {
      const int f = tid + i * NT, r = f / KQ, kk = (f % KQ) * 4;
      as[(kk + 0) * APAD + r] = ra[i].x;
      as[(kk + 1) * APAD + r] = ra[i].y;
      as[(kk + 2) * APAD + r] = ra[i].z;
      as[(kk + 3) * APAD + r] = ra[i].w;
    }
    #pragma unroll
    for (int i = 0; i < B_LD; ++i) {
      const int f = tid + i * NT, r = f / KQ, kk = (f % KQ) * 4;
      bs[(kk + 0) * BPAD + r] = rb[i].x;
      bs[(kk + 1) * BPAD + r] = rb[i].y;
      bs[(kk + 2) * BPAD + r] = rb[i].z;
      bs[(kk + 3) * BPAD + r] = rb[i].w;
    }
  };

  float acc[TM][TN];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  // Every group runs the same number of steps (uniform __syncthreads); steps past K load zeros.
  const int ktiles_all = (K + BK - 1) / BK;
  const int ktiles = (ktiles_all + SK - 1) / SK;
  const int kbase = g * ktiles * BK;
  load_global(kbase);
  store_shared(0);
  __syncthreads();

  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    if (kt + 1 < ktiles) load_global(kbase + (kt + 1) * BK);
    const float* as = As + cur * A_BUF;
    const float* bs = Bs + cur * B_BUF;
    #pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
      #pragma unroll
      for (int q = 0; q < MQ; ++q) {
        const float4 t = *reinterpret_cast<const float4*>(as + k * APAD + q * MS + ty * 4);
        a[q * 4 + 0] = t.x; a[q * 4 + 1] = t.y; a[q * 4 + 2] = t.z; a[q * 4 + 3] = t.w;
      }
      #pragma unroll
      for (int q = 0; q < NQ; ++q) {
        const float4 t = *reinterpret_cast<const float4*>(bs + k * BPAD + q * NS + tx * 4);
        b[q * 4 + 0] = t.x; b[q * 4 + 1] = t.y; b[q * 4 + 2] = t.z; b[q * 4 + 3] = t.w;
      }
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (kt + 1 < ktiles) store_shared(cur ^ 1);
    __syncthreads();
  }

  if (SK > 1) {
    // Groups 1..SK-1 park their partial tiles in shared memory; group 0 adds them up.
    // (The loop above ended with __syncthreads, so the tile buffers are free.)
    if (g > 0) {
      float* red = smem + (g - 1) * BM * BN;
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) red[(i * TN + j) * NT + tid] = acc[i][j];
    }
    __syncthreads();
    if (g > 0) return;
    #pragma unroll
    for (int s = 0; s < SK - 1; ++s) {
      const float* red = smem + s * BM * BN;
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += red[(i * TN + j) * NT + tid];
    }
  }

  // Epilogue: + bias, ReLU, guarded store (float4 when N % 4 == 0 and pointers aligned).
  const bool vec_store = ((N & 3) == 0) &&
                         ((reinterpret_cast<uintptr_t>(C) & 15u) == 0) &&
                         ((reinterpret_cast<uintptr_t>(bias) & 15u) == 0);
  #pragma unroll
  for (int qn = 0; qn < NQ; ++qn) {
    const int col = n0 + qn * NS + tx * 4;
    float bv[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) bv[j] = (col + j < N) ? __ldg(bias + col + j) : 0.0f;
    #pragma unroll
    for (int qm = 0; qm < MQ; ++qm) {
      #pragma unroll
      for (int ii = 0; ii < 4; ++ii) {
        const int i = qm * 4 + ii;
        const int row = m0 + qm * MS + ty * 4 + ii;
        if (row >= M) continue;
        float o[4];
        #pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = fmaxf(acc[i][qn * 4 + j] + bv[j], 0.0f);
        float* dst = C + (int64_t)row * N + col;
        if (vec_store) {
          if (col < N) *reinterpret_cast<float4*>(dst) = make_float4(o[0], o[1], o[2], o[3]);
        } else {
          #pragma unroll
          for (int j = 0; j < 4; ++j)
            if (col + j < N) dst[j] = o[j];
        }
      }
    }
  }
}

template <int BM, int BN, int BK, int TM, int TN, int SK>
static void launch_cfg(const float* A, const float* B, const float* bias, float* C,
                       int M, int N, int K, bool vec, cudaStream_t stream) {
  constexpr int NT = (BM / TM) * (BN / TN) * SK;
  const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
  if (vec) sgemm_bias_relu_kernel<BM, BN, BK, TM, TN, SK, true><<<grid, NT, 0, stream>>>(A, B, bias, C, M, N, K);
  else sgemm_bias_relu_kernel<BM, BN, BK, TM, TN, SK, false><<<grid, NT, 0, stream>>>(A, B, bias, C, M, N, K);
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Tile choice: 128x128 (256 threads) when that alone fills the SMs; otherwise 128x64 with
// two K groups (256 threads); for still smaller grids 64x64 with 4x4 per thread and two K
// groups (512 threads). Measured on H200, 1024^3: 128x128 115 us, 128x64 + two K groups
// 69 us (cuBLAS fp32: 66 us); 512x1024x1024: 64x64 + two K groups 42 us (cuBLAS 39 us).
// M, N, K < 2^31 (checked by the caller).
cudaError_t launch_linear_bias_relu(const float* A, const float* B, const float* bias, float* C,
                                    int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  const int M = (int)m, N = (int)n, K = (int)k;
  const bool vec = (K % 4 == 0) && aligned16(A) && aligned16(B);
  const int64_t t128 = (int64_t)((M + 127) / 128) * ((N + 127) / 128);
  const int64_t t12864 = (int64_t)((M + 127) / 128) * ((N + 63) / 64);
  if (TILE == 1 || (TILE == 0 && t128 >= sms)) launch_cfg<128, 128, 8, 8, 8, 1>(A, B, bias, C, M, N, K, vec, stream);
  else if (TILE == 2 || (TILE == 0 && 4 * t12864 >= 3 * sms))
    launch_cfg<128, 64, 8, 8, 8, 2>(A, B, bias, C, M, N, K, vec, stream);
  else launch_cfg<64, 64, 16, 4, 4, 2>(A, B, bias, C, M, N, K, vec, stream);
  return cudaGetLastError();
}
"""

_ext = load_inline(
    name="linear_bias_relu_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["linear_bias_relu"],
    extra_cuda_cflags=["-O3", *[f"-D{k}={v}" for k, v in CONFIG.items()]],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_bias_relu(x, self.linear.weight, self.linear.bias)
