"""CUDA solution: row softmax, one thread block per row, row held in registers.

Main path (last dim a multiple of 4, <= 32768, 16-byte aligned): each thread loads its
share of the row as float4 into registers once, the block reduces the max and then the
sum of exp(x - max) with warp shuffles (+ one shared-memory step across warps), and the
thread writes exp(x - max) * (1/sum) as float4 straight from registers. So global memory
sees exactly one read and one write per element. The block size is chosen per shape so each
thread holds about 4 float4 (256 threads for 4096 columns).

Fallback (other shapes): a single-read online softmax (running max and rescaled sum per
thread, merged across the block), then a second pass that writes the output.
expf and IEEE division are used throughout (no fast-math intrinsics).
cuda_sources is plain CUDA (kernels and a raw-pointer launcher, no torch headers) and
cpp_sources is the torch binding layer (checks, device guard, allocation, stream, launch).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Tuning space (`kcoder tune`): CONFIG reaches the CUDA unit as -D flags (the binding unit's
# flags do not change, so every point reuses its object); tuning rewrites only the CONFIG line.
TUNE = {"TARGET_VPT": [1, 2, 4, 8], "ONLINE_THREADS": [128, 256, 512]}
CONFIG = {"TARGET_VPT": 4, "ONLINE_THREADS": 256}

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

cudaError_t launch_softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "CUDA tensor expected");
  const c10::cuda::CUDAGuard device_guard(x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 tensor expected");
  TORCH_CHECK(x.is_contiguous(), "contiguous tensor expected");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  auto out = torch::empty_like(x);
  if (x.numel() == 0) return out;
  const int64_t C = x.size(-1);
  const int64_t R = x.numel() / C;
  TORCH_CHECK(R <= 2147483647LL, "too many rows");
  const cudaError_t err = launch_softmax_rows(x.data_ptr<float>(), out.data_ptr<float>(), R, C,
                                              c10::cuda::getCurrentCUDAStream());
  C10_CUDA_CHECK(err);
  return out;
}
"""

CUDA_SOURCE = r"""
#ifndef TARGET_VPT
#define TARGET_VPT 4
#endif
#ifndef ONLINE_THREADS
#define ONLINE_THREADS 256
#endif
#include <cuda_runtime.h>
#include <cstdint>
#include <cmath>
#include <algorithm>

__device__ __forceinline__ float warp_max(float v) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide reductions; every thread gets the result. `red` holds 32 floats.
__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();  // red is reused by the next reduction
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}

// One block per row; VPT float4 per thread held in registers.
template <int VPT>
__global__ void __launch_bounds__(1024) softmax_reg_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                           int64_t C) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float4* xr = reinterpret_cast<const float4*>(x + row * C);
  float4* yr = reinterpret_cast<float4*>(y + row * C);
  const int c4 = (int)(C >> 2);
  float4 v[VPT];
  float m = -INFINITY;
  #pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int idx = threadIdx.x + j * blockDim.x;
    if (idx < c4) {
      v[j] = __ldg(xr + idx);
      m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    } else {
      v[j] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  }
  m = block_max(m, red);
  float s = 0.0f;
  #pragma unroll
  for (int j = 0; j < VPT; ++j) {
    v[j].x = expf(v[j].x - m);
    v[j].y = expf(v[j].y - m);
    v[j].z = expf(v[j].z - m);
    v[j].w = expf(v[j].w - m);
    s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
  }
  s = block_sum(s, red);
  const float inv = 1.0f / s;
  #pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int idx = threadIdx.x + j * blockDim.x;
    if (idx < c4) {
      float4 o;
      o.x = v[j].x * inv;
      o.y = v[j].y * inv;
      o.z = v[j].z * inv;
      o.w = v[j].w * inv;
      yr[idx] = o;
    }
  }
}

// Merge two (max, sum) online-softmax states.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) { m = mn; s = 0.0f; return; }
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

// Any shape / alignment: online pass for (max, sum), then one write pass.
__global__ void __launch_bounds__(ONLINE_THREADS) softmax_online_kernel(const float* __restrict__ x,
                                                                        float* __restrict__ y, int64_t C) {
  __shared__ float red_m[32];
  __shared__ float red_s[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * C;
  float* yr = y + row * C;
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float v = __ldg(xr + i);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;  // expf(-inf) = 0 on the first element
      m = v;
    } else if (m != -INFINITY) {  // skip -inf while the running max is still -inf
      s += expf(v - m);
    }
  }
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
  __syncthreads();
  m = lane < nw ? red_m[lane] : -INFINITY;
  s = lane < nw ? red_s[lane] : 0.0f;
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  const float inv = 1.0f / s;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) yr[i] = expf(__ldg(xr + i) - m) * inv;
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// x and y: R rows of C floats each (R < 2^31, checked by the caller).
cudaError_t launch_softmax_rows(const float* xp, float* yp, int64_t R, int64_t C, cudaStream_t stream) {
  if (R == 0 || C == 0) return cudaSuccess;
  const int64_t c4 = C / 4;
  if (C % 4 == 0 && c4 <= 1024 * 8 && aligned16(xp) && aligned16(yp)) {
    // about TARGET_VPT float4 per thread, block size a multiple of 32 in [32, 1024]
    int64_t threads = ((c4 + TARGET_VPT - 1) / TARGET_VPT + 31) / 32 * 32;
    threads = std::max<int64_t>(32, std::min<int64_t>(1024, threads));
    const int64_t vpt = (c4 + threads - 1) / threads;
    const dim3 grid((unsigned)R), block((unsigned)threads);
    if (vpt <= 1) softmax_reg_kernel<1><<<grid, block, 0, stream>>>(xp, yp, C);
    else if (vpt <= 2) softmax_reg_kernel<2><<<grid, block, 0, stream>>>(xp, yp, C);
    else if (vpt <= 4) softmax_reg_kernel<4><<<grid, block, 0, stream>>>(xp, yp, C);
    else softmax_reg_kernel<8><<<grid, block, 0, stream>>>(xp, yp, C);
  } else {
    softmax_online_kernel<<<(unsigned)R, ONLINE_THREADS, 0, stream>>>(xp, yp, C);
  }
  return cudaGetLastError();
}
"""

_ext = load_inline(
    name="softmax_rows_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["softmax_rows"],
    extra_cuda_cflags=["-O3", *[f"-D{k}={v}" for k, v in CONFIG.items()]],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_rows(x)
