import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B: a GEMM, to test the --allow gemm policy."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(128, 256), torch.randn(256, 64)]


def get_init_inputs():
    return []
