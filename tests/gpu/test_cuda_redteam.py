"""CUDA red team for the trust boundary (marker `gpu`): a persisting-L2 access-policy window
and background GPU load started in __init__. Each is refused by the static checks; with the
static checks off (kcoder's own tests only) the layers behind them hold: the carve-out is
reset before every timed call, and no candidate process is alive while baselines are timed."""

from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ATTACK_CU = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_add_relu_k(const float* a, const float* b, float* o, int64_t n, float s) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = a[i] * s + b[i]; o[i] = v > 0.f ? v : 0.f; }
}
__global__ void spin_k(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}

cudaError_t launch_scale_add_relu(const float* a, const float* b, float* o, int64_t n, float s, cudaStream_t st) {
    scale_add_relu_k<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(a, b, o, n, s);
    return cudaGetLastError();
}

// Keep a window of device memory persisting in L2, on the stream the timer uses.
cudaError_t set_l2_window(void* base, size_t bytes, cudaStream_t st) {
    cudaError_t e = cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 32u << 20);
    if (e != cudaSuccess) return e;
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = base;
    attr.accessPolicyWindow.num_bytes = bytes;
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    return cudaStreamSetAttribute(st, cudaStreamAttributeAccessPolicyWindow, &attr);
}

// Occupy every SM for a long time from a private stream: background load for the baselines.
cudaError_t spin_in_background(long long cycles) {
    cudaStream_t side;
    cudaError_t e = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    if (e != cudaSuccess) return e;
    spin_k<<<132 * 2, 1024, 0, side>>>(cycles);  // one wave: every SM busy
    return cudaGetLastError();
}
"""

ATTACK_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

cudaError_t launch_scale_add_relu(const float* a, const float* b, float* o, int64_t n, float s, cudaStream_t st);
cudaError_t set_l2_window(void* base, size_t bytes, cudaStream_t st);
cudaError_t spin_in_background(long long cycles);

torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    C10_CUDA_CHECK(launch_scale_add_relu(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
                                         x.numel(), (float)scale, c10::cuda::getCurrentCUDAStream()));
    return out;
}
void pin_l2(torch::Tensor region) {
    C10_CUDA_CHECK(set_l2_window(region.data_ptr(), region.nbytes(), c10::cuda::getCurrentCUDAStream()));
}
void background_load(int64_t cycles) { C10_CUDA_CHECK(spin_in_background(cycles)); }
"""


def _candidate(init: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kcoder_cuda_attacks", cpp_sources=[{ATTACK_CPP!r}], cuda_sources=[{ATTACK_CU!r}],
                   functions=["scale_add_relu", "pin_l2", "background_load"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        {init}

    def forward(self, x, y):
        return _ext.scale_add_relu(x, y, self.scale)
'''


def _eval(tmp_path: Path, init: str, **options):
    from kcoder.evaluate import evaluate

    path = tmp_path / "attack.py"
    path.write_text(_candidate(init))
    return evaluate(PROBLEMS / "scale_add.py", path, fast_options(device="cuda", **options))


# __init__ pins a 4 MB buffer and the caching allocator's next blocks (where inputs land).
PIN = "self.region = torch.empty(1 << 20, device='cuda'); _ext.pin_l2(self.region)"
SPIN = "_ext.background_load(1 << 34)"  # about 9 s at 1.98 GHz


def test_persisting_l2_window_refused_statically(tmp_path):
    verdict = _eval(tmp_path, PIN, stop_after="verify")
    assert verdict.stage == "static" and verdict.reward == -1, verdict.reason


def test_persisting_l2_window_is_reset_before_timed_calls(tmp_path):
    verdict = _eval(tmp_path, PIN, static_checks=False)
    assert verdict.correct, verdict.reason
    assert any("persisting-L2 carve-out found set" in n for n in verdict.notes), verdict.notes


def test_background_gpu_load_cannot_slow_the_baselines(tmp_path):
    honest = _eval(tmp_path, "pass", static_checks=False, timing_budget_s=0.5)
    loaded = _eval(tmp_path, SPIN, static_checks=False, timing_budget_s=0.5, timing_timeout_s=120)
    assert honest.correct, honest.reason
    print(f"\nBASELINE SABOTAGE eager honest {honest.eager_us:.1f} us, with background load "
          f"{loaded.eager_us or float('nan'):.1f} us; verdict: {loaded.reason}")
    if loaded.correct:  # its own timing suffers; the baselines must not
        assert loaded.eager_us < 1.3 * honest.eager_us + 5
        assert loaded.speedup_vs_eager < 1.3 * honest.speedup_vs_eager
