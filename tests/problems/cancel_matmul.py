import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B where every product term carries a large common part that cancels (A's rows
    are offset by 1e3, B's columns sum to about zero): float32's rounding in any summation
    order is ~1e-3 of the answer, beyond the float32 tolerance (the float64 rule's test)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    b = torch.randn(4096, 64)
    return [torch.randn(64, 4096) + 1e3, b - b.mean(dim=0)]


def get_init_inputs():
    return []
