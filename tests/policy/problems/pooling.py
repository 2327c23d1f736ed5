"""Pointwise -> MaxPool2d(2) -> ReLU on an odd spatial size (floor mode drops the last row
and column): one kernel, a max over the window dims with the pointwise ops before and after
fused. And an overlapping AvgPool2d(3, stride 2) after exp (its prologue a kernel of its own)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(6, 1, 1))
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(3, stride=2)

    def forward(self, x):
        y = x * self.scale + 0.5
        return torch.relu(self.pool(y)), self.avg(torch.exp(-x * x)) * 2.0


def get_inputs():
    return [torch.randn(3, 6, 13, 15)]


def get_init_inputs():
    return []
