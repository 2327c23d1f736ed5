"""GroupNorm, then the mean over channels and positions. At initialisation (GroupNorm's weight all
ones, its bias all zeros) every output is the mean of the bias (zero): a kernel that returns that
without reading x is right for the initial weights only."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x).mean(dim=(1, 2))


def get_inputs():
    return [torch.randn(8, 16, 64)]


def get_init_inputs():
    return [16, 4]
