"""out = clamp(mish(x) + bias, -1, 3): the cpu target's pointwise chain with two transcendental
steps (mish = x * tanh(softplus(x))), a per-column bias and a clamp (kcoder issue 29: the
policy's first cpu kernel for it ran at 0.43x eager, softplus and tanh as scalar libm calls)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(F.mish(x) + self.bias, min=-1.0, max=3.0)


ROWS = 2048
FEATURES = 4096


def get_inputs():
    return [torch.randn(ROWS, FEATURES) * 3]


def get_init_inputs():
    return [FEATURES]
