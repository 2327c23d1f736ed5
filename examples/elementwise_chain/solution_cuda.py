"""CUDA solution: gelu(x*w+b)*sigmoid(x) fused into a single memory pass.

Memory-bound: 16-byte (float4) loads of x and float4 stores (two in flight per thread), with
w and b read as float4 through the read-only cache (they are tiny and stay in L1/L2). The
math uses full-precision erff/expf and IEEE division, so results match PyTorch's fp32 to a
few ulp. A scalar kernel covers shapes whose last dim is not a multiple of 4 or misaligned
pointers. 32-bit index arithmetic is used whenever the tensor has < 2^31 elements.
cuda_sources is plain CUDA (kernels and a raw-pointer launcher, no torch headers) and
cpp_sources is the torch binding layer (checks, device guard, allocation, stream, launch).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Tuning space (`kcoder tune`): CONFIG reaches the CUDA unit as -D flags (the binding unit's
# flags do not change, so every point reuses its object); tuning rewrites only the CONFIG line.
TUNE = {"THREADS": [128, 256, 512, 1024], "BLOCKS_PER_SM": [4, 8, 16, 32, 64]}
CONFIG = {"THREADS": 256, "BLOCKS_PER_SM": 32}

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

cudaError_t launch_elementwise_chain(const float* x, const float* w, const float* b, float* out,
                                     int64_t n, int64_t c, cudaStream_t stream);

torch::Tensor elementwise_chain(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "CUDA tensors expected");
  const c10::cuda::CUDAGuard device_guard(x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
              b.scalar_type() == torch::kFloat32, "float32 tensors expected");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t C = x.size(-1);
  TORCH_CHECK(w.numel() == C && b.numel() == C, "weight/bias must match the last dim of x");
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const cudaError_t err = launch_elementwise_chain(
      x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, C,
      c10::cuda::getCurrentCUDAStream());
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
#define BLOCKS_PER_SM 32
#endif

__device__ __forceinline__ float chain(float x, float w, float b) {
  const float z = x * w + b;
  const float g = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
  const float s = 1.0f / (1.0f + expf(-x));
  return g * s;
}

__device__ __forceinline__ float4 chain4(float4 x, float4 w, float4 b) {
  float4 o;
  o.x = chain(x.x, w.x, b.x);
  o.y = chain(x.y, w.y, b.y);
  o.z = chain(x.z, w.z, b.z);
  o.w = chain(x.w, w.w, b.w);
  return o;
}

// Grid-stride over float4; two independent float4 per thread per step to keep more bytes in
// flight. The column index is advanced incrementally (no division in the loop).
template <typename IndexT>
__global__ void __launch_bounds__(THREADS) chain_vec4_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                                  const float4* __restrict__ b, float4* __restrict__ out,
                                  IndexT n4, IndexT c4) {
  const IndexT stride = (IndexT)gridDim.x * blockDim.x;
  const IndexT sc = stride % c4;
  IndexT i = (IndexT)blockIdx.x * blockDim.x + threadIdx.x;
  IndexT c = i % c4;
  for (; i + stride < n4; i += 2 * stride) {
    IndexT c1 = c + sc;
    if (c1 >= c4) c1 -= c4;
    const float4 x0 = __ldg(x + i), x1 = __ldg(x + i + stride);
    const float4 w0 = __ldg(w + c), w1 = __ldg(w + c1);
    const float4 b0 = __ldg(b + c), b1 = __ldg(b + c1);
    out[i] = chain4(x0, w0, b0);
    out[i + stride] = chain4(x1, w1, b1);
    c = c1 + sc;
    if (c >= c4) c -= c4;
  }
  if (i < n4) out[i] = chain4(__ldg(x + i), __ldg(w + c), __ldg(b + c));
}

template <typename IndexT>
__global__ void __launch_bounds__(THREADS) chain_scalar_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ b, float* __restrict__ out,
                                    IndexT n, IndexT c) {
  const IndexT stride = (IndexT)gridDim.x * blockDim.x;
  for (IndexT i = (IndexT)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const IndexT col = i % c;
    out[i] = chain(__ldg(x + i), __ldg(w + col), __ldg(b + col));
  }
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

cudaError_t launch_elementwise_chain(const float* xp, const float* wp, const float* bp, float* op,
                                     int64_t n, int64_t C, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  const int threads = THREADS;
  const int64_t max_blocks = (int64_t)sms * BLOCKS_PER_SM;
  const bool vec = (C % 4 == 0) && aligned16(xp) && aligned16(wp) && aligned16(bp) && aligned16(op);
  const bool small = n < (int64_t(1) << 31);
  if (vec) {
    const int64_t n4 = n / 4, c4 = C / 4;
    const int blocks = (int)std::min<int64_t>((n4 + 2 * threads - 1) / (2 * threads), max_blocks);
    if (small) {
      chain_vec4_kernel<uint32_t><<<blocks, threads, 0, stream>>>(
          (const float4*)xp, (const float4*)wp, (const float4*)bp, (float4*)op, (uint32_t)n4, (uint32_t)c4);
    } else {
      chain_vec4_kernel<int64_t><<<blocks, threads, 0, stream>>>(
          (const float4*)xp, (const float4*)wp, (const float4*)bp, (float4*)op, n4, c4);
    }
  } else {
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, max_blocks);
    if (small) {
      chain_scalar_kernel<uint32_t><<<blocks, threads, 0, stream>>>(xp, wp, bp, op, (uint32_t)n, (uint32_t)C);
    } else {
      chain_scalar_kernel<int64_t><<<blocks, threads, 0, stream>>>(xp, wp, bp, op, n, C);
    }
  }
  return cudaGetLastError();
}
"""

_ext = load_inline(
    name="elementwise_chain_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["elementwise_chain"],
    extra_cuda_cflags=["-O3", *[f"-D{k}={v}" for k, v in CONFIG.items()]],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.elementwise_chain(x, self.weight, self.bias)
