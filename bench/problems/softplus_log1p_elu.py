"""out = softplus(x) * sigmoid(y) + log1p(|x|) - elu(y): softplus, sigmoid, log1p and elu, the
exp/log family of the op table, over two 2048 x 4096 float32 inputs."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.softplus(x) * torch.sigmoid(y) + torch.log1p(x.abs()) - F.elu(y)


def get_inputs():
    return [torch.randn(2048, 4096) * 4, torch.randn(2048, 4096) * 4]


def get_init_inputs():
    return []
