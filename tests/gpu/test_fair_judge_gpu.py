"""A fair judge on the GPU (issue 36, marker `gpu`): a library call whose kernels overlap (or
run on its own streams) is not work off the timed stream, side-stream work still is; an
output that cancels is judged against float64 (compare64.py), so a correct kernel passes."""

from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options
from sources import cuda_candidate_source

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _eval(tmp_path: Path, source: str, problem: str, **options):
    from kcoder.evaluate import evaluate

    path = tmp_path / "candidate.py"
    path.write_text(source)
    return evaluate(PROBLEMS / problem, path, fast_options(device="cuda", **options))


def _range(fn, *inputs):
    from kcoder.evaluate.candidate.timedrange import profile_timed_range
    from kcoder.evaluate.harness.timing import Clock

    clock = Clock("cuda")
    with torch.no_grad():
        for _ in range(2):
            fn(*inputs)
        torch.cuda.synchronize()
        return profile_timed_range(clock, fn, inputs)


def test_profiled_range_places_library_and_side_stream_work():
    x = torch.randn(64, 64, 64, 64, device="cuda")
    conv = torch.nn.ConvTranspose2d(64, 64, 4, stride=2, padding=1).cuda()
    library = _range(conv, x)
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def hidden(m):  # work on a side stream nobody waits for
        with torch.cuda.stream(side):
            out = m @ m
        return out

    def joined(m):  # forked from and joined back to the current stream, as libraries do: honest
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = m @ m
        torch.cuda.current_stream().wait_stream(side)
        return out

    found = {"library": library, "hidden": _range(hidden, a), "joined": _range(joined, a)}
    for name, f in found.items():
        print(f"\nRANGE {name}: kernels {f.kernel_us:.1f} us/call, other streams {f.other_streams_us:.1f}, "
              f"outside {f.outside_us:.1f}, timed stream {f.timed_stream} {f.problem}")
    assert all(f.problem == "" for f in found.values())
    assert library.kernel_us > 0 and library.outside_us < 5.0
    assert found["joined"].other_streams_us > 100 and found["joined"].outside_us < 5.0
    assert found["hidden"].outside_us > 0.5 * found["hidden"].other_streams_us > 50


def test_library_call_with_overlapping_kernels_is_accepted(tmp_path):
    source = """import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)

    def forward(self, x):
        c = self.conv_transpose
        return F.conv_transpose2d(x, c.weight, c.bias, stride=c.stride, padding=c.padding)
"""
    verdict = _eval(tmp_path, source, "conv_transpose.py", allow=["conv"], compile_baseline=False,
                    timing_budget_s=0.5)
    print(f"\nCONV_TRANSPOSE {verdict.reason}; notes: {verdict.notes}")
    assert verdict.correct and verdict.stage == "done", verdict.reason
    assert any(n.startswith("device kernel time per call") for n in verdict.notes), verdict.notes
    assert not any("could not place the timed range" in n for n in verdict.notes), verdict.notes


def test_side_stream_exploit_refused_by_the_profiler(tmp_path):
    # static checks off: the profiler's check itself must refuse it (the outer clock may too)
    verdict = _eval(tmp_path, cuda_candidate_source("return _ext.hidden_stream(x, y, self.scale)"), "scale_add.py",
                    static_checks=False)
    print(f"\nHIDDEN STREAM {verdict.reason}")
    assert not verdict.correct and verdict.stage == "timing", verdict.reason
    assert "outside the timed stream" in verdict.reason or "judge's own clock" in verdict.reason, verdict.reason


def test_cancelling_gemm_in_another_order_is_accepted_on_the_gpu(tmp_path):
    source = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.addmm(torch.mm(a[:, :2048], b[:2048]), a[:, 2048:], b[2048:])
"""
    verdict = _eval(tmp_path, source, "cancel_matmul.py", allow=["gemm"], compile_baseline=False)
    print(f"\nCANCEL GEMM {verdict.reason}; notes: {[n for n in verdict.notes if 'tolerance' in n]}")
    assert verdict.correct and verdict.stage == "done", verdict.reason


GROUPNORM_MEAN_CU = r"""
#include <cuda_runtime.h>
#include <cstdint>

// Sum over the block; `shared` holds 33 floats (one per warp, and the total).
__device__ float block_sum(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // the previous call's total has been read
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) shared[32] = v;
    }
    __syncthreads();
    return shared[32];
}

// One block per sample: for each group, mean and variance in two passes (eager uses Welford),
// then the sum of the normalized, scaled and shifted values; out = that sum / (C * spatial).
__global__ void groupnorm_mean_kernel(const float* x, const float* w, const float* b, float* out, int channels,
                                      int groups, int64_t spatial, float eps) {
    __shared__ float shared[33];
    const int per = channels / groups;
    const int64_t n = (int64_t)per * spatial;
    const float* xs = x + (int64_t)blockIdx.x * channels * spatial;
    float total = 0.f;
    for (int g = 0; g < groups; ++g) {
        const float* xg = xs + g * n;
        float s = 0.f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xg[i];
        const float mean = block_sum(s, shared) / (float)n;
        float q = 0.f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { const float d = xg[i] - mean; q += d * d; }
        const float rstd = rsqrtf(block_sum(q, shared) / (float)n + eps);
        float acc = 0.f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const int c = g * per + (int)(i / spatial);
            acc += (xg[i] - mean) * rstd * w[c] + b[c];
        }
        total += block_sum(acc, shared);
    }
    if (threadIdx.x == 0) out[blockIdx.x] = total / (float)((int64_t)channels * spatial);
}

cudaError_t launch_groupnorm_mean(const float* x, const float* w, const float* b, float* out, int batch, int channels,
                                  int groups, int64_t spatial, float eps, cudaStream_t stream) {
    if (batch == 0) return cudaSuccess;
    groupnorm_mean_kernel<<<batch, 512, 0, stream>>>(x, w, b, out, channels, groups, spatial, eps);
    return cudaGetLastError();
}
"""

GROUPNORM_MEAN_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

cudaError_t launch_groupnorm_mean(const float* x, const float* w, const float* b, float* out, int batch, int channels,
                                  int groups, int64_t spatial, float eps, cudaStream_t stream);

torch::Tensor groupnorm_mean(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t groups, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 CUDA x");
    TORCH_CHECK(x.size(1) % groups == 0, "channels must divide into groups");
    auto out = torch::empty({x.size(0)}, x.options());
    const int64_t spatial = x.numel() / (x.size(0) * x.size(1));
    C10_CUDA_CHECK(launch_groupnorm_mean(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
                                         out.data_ptr<float>(), (int)x.size(0), (int)x.size(1), (int)groups, spatial,
                                         (float)eps, c10::cuda::getCurrentCUDAStream()));
    return out;
}
"""


def test_conv3d_groupnorm_mean_correct_kernel_is_accepted(tmp_path):
    # issue 36: KernelBench L2 23's output is zero up to rounding; a two-pass kernel's noise
    # differs from eager's Welford and the float32 tolerance alone refused it
    source = f"""import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kcoder_test_groupnorm_mean", cpp_sources=[{GROUPNORM_MEAN_CPP!r}],
                   cuda_sources=[{GROUPNORM_MEAN_CU!r}], functions=["groupnorm_mean"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        y = F.conv3d(x, self.conv.weight, self.conv.bias)
        gn = self.group_norm
        return _ext.groupnorm_mean(y, gn.weight, gn.bias, gn.num_groups, gn.eps)
"""
    verdict = _eval(tmp_path, source, "conv3d_groupnorm_mean.py", allow=["conv"], compile_baseline=False)
    print(f"\nGROUPNORM MEAN {verdict.reason}; notes: {[n for n in verdict.notes if 'tolerance' in n]}")
    assert verdict.correct and verdict.stage == "done", verdict.reason
