"""Reductions whose shapes pick each CUDA row layout: strided rows (a sum and an argmax over a
middle dim), many short rows, and whole-tensor losses over one long row (split), on odd sizes."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x, y, z, w):
        middle = x.sum(dim=1) + torch.argmax(x, dim=1).float()
        short = z.amax(dim=-1)
        loss = F.mse_loss(y, torch.tanh(y) * 0.5)
        peak = w.abs().amax()
        return middle, short, loss, peak


def get_inputs():
    return [torch.randn(64, 129, 300), torch.randn(3, 40001), torch.randn(40000, 5), torch.randn(70001)]


def get_init_inputs():
    return []
