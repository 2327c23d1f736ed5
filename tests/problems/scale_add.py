import torch
import torch.nn as nn


class Model(nn.Module):
    """out = relu(x * scale + y): an elementwise chain small enough for fast CPU tests."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + y)


def get_inputs():
    return [torch.randn(512, 1024), torch.randn(512, 1024)]


def get_init_inputs():
    return [2.0]
