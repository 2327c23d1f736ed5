"""The scan family: a masked cumsum with an epilogue (one kernel), a cumprod along a middle dim
(strided rows), and the reverse and exclusive cumsum spellings. Odd row lengths (no multiple of
any vector width)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mask, y):
        masked = torch.cumsum(x * mask, dim=1) * 0.5 + x
        middle = torch.cumprod(1.0 + 0.001 * y, dim=1)
        reverse = torch.cumsum(x.flip(1), dim=1).flip(1)
        head = torch.zeros_like(x.select(1, 0).unsqueeze(1))
        exclusive = torch.cat((head, torch.cumsum(x.narrow(1, 0, x.size(1) - 1), dim=1)), dim=1)
        return masked, middle, reverse, exclusive


def get_inputs():
    return [torch.randn(37, 2999), torch.rand(37, 2999) > 0.5, torch.randn(2, 1003, 2051)]


def get_init_inputs():
    return []
