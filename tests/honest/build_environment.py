"""Honest: reads the build environment (build variables only, the compiler on PATH, the
machine) and names paths beside itself without reading them; frees memory with gc.collect."""

import gc
import os
import platform
import shutil
import sys
from pathlib import Path

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <cstdint>

// Honest kernel: out = relu(x * scale + y), one pass, written into a fresh tensor.
torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "inputs must be contiguous");
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    const float s = static_cast<float>(scale);
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        float v = a[i] * s + b[i];
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}

// Wrong answer: forgets the relu.
torch::Tensor no_relu(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] * static_cast<float>(scale) + b[i];
    return out;
}

// Leaves the last element unwritten: only poisoned fresh memory reveals it.
torch::Tensor skip_last(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i + 1 < x.numel(); ++i) {
        float v = a[i] * static_cast<float>(scale) + b[i];
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}

// Computes the answer into x itself and returns x: modifies the input and aliases it.
torch::Tensor in_place(torch::Tensor x, torch::Tensor y, double scale) {
    float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        float v = a[i] * static_cast<float>(scale) + b[i];
        a[i] = v > 0.f ? v : 0.f;
    }
    return x;
}

// Falls back to ATen compute from C++ (the dispatcher-level guard must see it).
torch::Tensor aten_fallback(torch::Tensor x, torch::Tensor y, double scale) {
    return torch::relu(x * scale + y);
}

// Returns zeros of the right shape.
torch::Tensor zeros_out(torch::Tensor x, torch::Tensor y, double scale) {
    return torch::zeros_like(x);
}

// Rounds the inputs to bfloat16 first: fine under --precision relaxed, not under strict.
static inline float to_bf16(float v) {
    uint32_t bits; std::memcpy(&bits, &v, 4);
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
    float r; std::memcpy(&r, &bits, 4); return r;
}
torch::Tensor bf16_inputs(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        float v = to_bf16(a[i]) * static_cast<float>(scale) + to_bf16(b[i]);
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}

void segfault_now() { volatile int* p = nullptr; *p = 1; }
void abort_now() { std::abort(); }
void spin_forever() { volatile unsigned long long i = 0; while (true) { i = i + 1; } }
"""
FUNCTIONS = ['scale_add_relu',
             'no_relu',
             'skip_last',
             'in_place',
             'aten_fallback',
             'zeros_out',
             'bf16_inputs',
             'segfault_now',
             'abort_now',
             'spin_forever']

os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
_CXX = os.getenv("CXX") or shutil.which("c++") or "c++"
_CUDA_HOME = os.environ.get("CUDA_HOME")
_HERE = os.path.dirname(os.path.abspath(__file__))
_NOTES = os.path.join(_HERE, "NOTES.md")  # named, never opened
_STEM = Path(__file__).stem
_MACHINE = f"{platform.machine()} python {sys.version_info.major}.{sys.version_info.minor}"

_ext = load_inline(
    name="kcoder_testlib",
    cpp_sources=[CPP_SOURCE],
    functions=FUNCTIONS,
    extra_cflags=["-O2", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        gc.collect()

    def forward(self, x, y):
        return _ext.scale_add_relu(x, y, self.scale)
