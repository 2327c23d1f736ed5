"""Honest: the extension is built by a cached helper (functools.lru_cache on a function that
calls load_inline), configured through a frozen dataclass; functools.partial binds an option."""

import dataclasses
import functools

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


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    name: str = "kcoder_testlib"
    cflags: tuple[str, ...] = ("-O2", "-fopenmp")


@functools.lru_cache(maxsize=8)
def _extension(config: BuildConfig = BuildConfig()):
    return load_inline(name=config.name, cpp_sources=[CPP_SOURCE], functions=FUNCTIONS,
                       extra_cflags=list(config.cflags), extra_ldflags=["-fopenmp"])


@functools.cache
def _default_config() -> BuildConfig:
    return BuildConfig()


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        # the extension's bound function takes no keywords (load_inline names no py::arg):
        # scale goes positionally
        self._run = functools.partial(_extension(_default_config()).scale_add_relu)

    def forward(self, x, y):
        return self._run(x, y, self.scale)
