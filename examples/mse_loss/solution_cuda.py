"""CUDA solution: mean((a - b)**2) as a two-stage, deterministic reduction.

Stage 1: a grid of about 8 blocks per SM streams a and b with 16-byte (float4) loads, four
float4 of each in flight per thread per step, squares and sums in fp32 registers, reduces
with warp shuffles then across warps in shared memory, and writes one partial per block.
Stage 2: one block adds the partials in double and writes sum / n into the 0-dim output.
No atomics, no zero-initialised accumulator, bit-identical results run to run.
cuda_sources is plain CUDA (kernels and raw-pointer launchers, no torch headers) and
cpp_sources is the torch binding layer (checks, device guard, allocation, stream, launch).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Tuning space (`kcoder tune`): CONFIG reaches the CUDA unit as -D flags (the binding unit's
# flags do not change, so every point reuses its object); tuning rewrites only the CONFIG line.
TUNE = {"THREADS": [128, 256, 512, 1024], "BLOCKS_PER_SM": [2, 4, 8, 16, 32]}
CONFIG = {"THREADS": 256, "BLOCKS_PER_SM": 8}

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

cudaError_t mse_loss_partial_count(const float* a, const float* b, int64_t n, int* count);
cudaError_t launch_mse_loss(const float* a, const float* b, int64_t n, float* partial, int count,
                            float* out, cudaStream_t stream);

torch::Tensor mse_loss(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "CUDA tensors expected");
  const c10::cuda::CUDAGuard device_guard(a.device());
  TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 tensors expected");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
  const int64_t n = a.numel();
  const float* ap = a.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  int blocks = 0;
  C10_CUDA_CHECK(mse_loss_partial_count(ap, bp, n, &blocks));

  auto out = torch::empty({}, a.options());
  auto partial = torch::empty({blocks}, a.options());
  const cudaError_t err = launch_mse_loss(ap, bp, n, partial.data_ptr<float>(), blocks,
                                          out.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_CHECK(err);
  return out;
}
"""

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>
#include <algorithm>

#ifndef THREADS
#define THREADS 256
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 8
#endif

__device__ __forceinline__ float sq4(float4 x, float4 y) {
  const float d0 = x.x - y.x, d1 = x.y - y.y, d2 = x.z - y.z, d3 = x.w - y.w;
  return (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
}

__device__ __forceinline__ float block_reduce_sum(float v) {
  __shared__ float red[THREADS / 32];
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < THREADS / 32 ? red[lane] : 0.0f;
  if (warp == 0) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;  // valid in thread 0
}

// VEC: a and b 16-byte aligned; float4 body plus a scalar tail of n % 4 elements.
template <bool VEC>
__global__ void __launch_bounds__(THREADS) sqdiff_partial_kernel(const float* __restrict__ a,
                                                                  const float* __restrict__ b,
                                                                  int64_t n, float* __restrict__ partial) {
  const int64_t tid = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * THREADS;
  float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
  int64_t tail_start = 0;
  if (VEC) {
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    const int64_t n4 = n >> 2;
    int64_t i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {
      const float4 x0 = __ldg(a4 + i), y0 = __ldg(b4 + i);
      const float4 x1 = __ldg(a4 + i + stride), y1 = __ldg(b4 + i + stride);
      const float4 x2 = __ldg(a4 + i + 2 * stride), y2 = __ldg(b4 + i + 2 * stride);
      const float4 x3 = __ldg(a4 + i + 3 * stride), y3 = __ldg(b4 + i + 3 * stride);
      acc0 += sq4(x0, y0);
      acc1 += sq4(x1, y1);
      acc2 += sq4(x2, y2);
      acc3 += sq4(x3, y3);
    }
    for (; i < n4; i += stride) acc0 += sq4(__ldg(a4 + i), __ldg(b4 + i));
    tail_start = n4 << 2;
  }
  for (int64_t i = tail_start + tid; i < n; i += stride) {
    const float d = __ldg(a + i) - __ldg(b + i);
    acc1 += d * d;
  }
  const float s = block_reduce_sum((acc0 + acc1) + (acc2 + acc3));
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(1024) finalize_kernel(const float* __restrict__ partial, int count, int64_t n,
                                float* __restrict__ out) {
  __shared__ double red[32];
  double v = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) v += (double)partial[i];
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) out[0] = (float)(v / (double)n);  // n == 0 -> NaN (0 / 0), like the reference mean
  }
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Number of stage-1 blocks (= partials the caller allocates): about 8 per SM, at least 1.
cudaError_t mse_loss_partial_count(const float* ap, const float* bp, int64_t n, int* count) {
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  const bool vec = aligned16(ap) && aligned16(bp);
  const int64_t work = vec ? (n / 4 + 3) / 4 : n / 4;  // float4 (x4 unroll) per thread
  int blocks = (int)std::min<int64_t>((work + THREADS - 1) / THREADS, (int64_t)sms * BLOCKS_PER_SM);
  *count = std::max(blocks, 1);
  return cudaSuccess;
}

// partial: `count` floats of scratch; out: one float, mean((a - b)^2).
cudaError_t launch_mse_loss(const float* ap, const float* bp, int64_t n, float* pp, int blocks,
                            float* out, cudaStream_t stream) {
  const bool vec = aligned16(ap) && aligned16(bp);
  if (vec) sqdiff_partial_kernel<true><<<blocks, THREADS, 0, stream>>>(ap, bp, n, pp);
  else sqdiff_partial_kernel<false><<<blocks, THREADS, 0, stream>>>(ap, bp, n, pp);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  finalize_kernel<<<1, 1024, 0, stream>>>(pp, blocks, n, out);
  return cudaGetLastError();
}
"""

_ext = load_inline(
    name="mse_loss_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["mse_loss"],
    extra_cuda_cflags=["-O3", *[f"-D{k}={v}" for k, v in CONFIG.items()]],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _ext.mse_loss(a, b)
