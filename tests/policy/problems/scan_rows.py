"""Scans over many long contiguous rows (a warp per row on CUDA): a masked cumsum with an
epilogue, the reverse and exclusive spellings and a cumprod over rows of 2052 (16-byte vectors
through the warp's transpose buffer, and a last chunk of 4 elements read one by one), and a
cumsum over an odd length (no vectors at all)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mask, z):
        masked = torch.cumsum(x * mask, dim=1) * 0.5 + x
        reverse = torch.cumsum(x.flip(1), dim=1).flip(1)
        head = torch.zeros_like(x.select(1, 0).unsqueeze(1))
        exclusive = torch.cat((head, torch.cumsum(x.narrow(1, 0, x.size(1) - 1), dim=1)), dim=1)
        product = torch.cumprod(1.0 + 0.001 * x, dim=1)
        odd = torch.cumsum(z, dim=1)
        return masked, reverse, exclusive, product, odd


def get_inputs():
    return [torch.randn(1100, 2052), torch.rand(1100, 2052) > 0.5, torch.randn(1030, 1999)]


def get_init_inputs():
    return []
