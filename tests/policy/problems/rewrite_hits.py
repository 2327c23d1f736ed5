"""Patterns the policy's rewrite pass (kcoder/policy/rewrite.py) must rewrite: every GEMM and
transposed convolution here is only read through a sum over its output, so none is left."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(96, 80)
        self.lin2 = nn.Linear(64, 72)
        self.sub = nn.Parameter(torch.randn(72))
        self.weight = nn.Parameter(torch.randn(40, 64))
        self.big = nn.Linear(2048, 2048, bias=False)  # the error of a reordered long sum, at scale
        self.convt = nn.ConvTranspose2d(6, 10, 3, stride=2)
        self.cbias = nn.Parameter(torch.randn(1, 10, 1, 1))

    def forward(self, x, y, z, img):
        a = self.lin(x).sum(dim=1, keepdim=True)  # GEMM + bias, sum: GEMV
        b = (self.lin2(y) - self.sub) * 2.0 / 3.0  # a subtracted parameter, a scalar chain
        b = (b + b).mean(dim=1)  # x + x, mean without keepdim
        c = -torch.matmul(y, self.weight.T) / 2 + y.sum(1, keepdim=True) * 1.0  # a row term
        c = c.sum(1)
        d = self.big(z).sum(-1) * 0.5
        e = (self.convt(img) * 0.5 + self.cbias).mean(dim=(2, 3), keepdim=True)  # global pool of a conv-T
        f = torch.max(a, dim=1, keepdim=True)[0].mean(dim=1) + 0.0  # reductions over a size-1 dim
        return a, b, c, d, e, f


def get_inputs():
    return [torch.randn(12, 96), torch.randn(9, 64), torch.randn(5, 2048), torch.randn(3, 6, 7, 8)]


def get_init_inputs():
    return []
