"""Look-alikes of the rewrite pass's patterns that it must leave alone (kcoder/policy/rewrite.py):
each GEMM or convolution here is needed as it is."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.ModuleList(nn.Linear(32, 24) for _ in range(4))
        self.row = nn.Parameter(torch.randn(24))
        self.convt_pad = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)
        self.conv = nn.Conv2d(4, 6, 3)

    def forward(self, x, img):
        h = self.lin[0](x)
        a = h.sum(1, keepdim=True) + h  # the GEMM's output is read twice
        b = torch.sigmoid(self.lin[1](x)).sum(1)  # not affine between the GEMM and the sum
        c = self.lin[2](x).sum(0)  # over the batch, not the output features
        d = (self.lin[3](x) * self.row).sum(1)  # a factor that varies along the summed dim
        e = self.convt_pad(img).mean((2, 3))  # padding crops the transposed convolution
        f = self.conv(img).mean((2, 3))  # a forward convolution
        g = x * 1e-35 * 1e35  # constants whose product folds outside float32's normal range
        return a, b, c, d, e, f, g


def get_inputs():
    return [torch.randn(10, 32), torch.randn(2, 4, 9, 9)]


def get_init_inputs():
    return []
