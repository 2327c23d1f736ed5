"""An honest copy kernel: 16-byte loads and stores, grid-stride, the output allocated as eager's is."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += (long)gridDim.x * blockDim.x)
    y[i] = x[i];
}
__global__ void copy1(const float* __restrict__ x, float* __restrict__ y, long start, long n) {
  long i = start + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
torch::Tensor copy(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat, "contiguous float CUDA tensor");
  auto y = torch::empty_like(x);
  long n = x.numel(), n4 = n / 4;
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device());
  if (n4) copy4<<<sms * 8, 256>>>((const float4*)x.data_ptr<float>(), (float4*)y.data_ptr<float>(), n4);
  if (n > n4 * 4) copy1<<<1, 4>>>(x.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n);
  return y;
}
"""

_ext = load_inline(name="kcoder_gpu_big_copy", cpp_sources=["torch::Tensor copy(torch::Tensor x);"],
                   cuda_sources=[CUDA], functions=["copy"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.copy(x)
