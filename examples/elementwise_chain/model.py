import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """out = gelu(x * weight + bias) * sigmoid(x), weight/bias broadcast over rows.

    A chain of five elementwise ops (mul, add, exact erf GELU, sigmoid, mul). Eager PyTorch
    runs each as its own pass over memory and allocates four intermediates.
    """

    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x * self.weight + self.bias) * torch.sigmoid(x)


ROWS = 2048
FEATURES = 4096


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return [FEATURES]
