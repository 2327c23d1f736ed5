import torch
import torch.nn as nn


class Model(nn.Module):
    """Outputs around 1e-6: a loose absolute tolerance would accept zeros."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-6


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
