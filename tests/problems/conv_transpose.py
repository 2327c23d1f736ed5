import torch
import torch.nn as nn


class Model(nn.Module):
    """A transposed convolution (cuDNN): the library's kernels overlap one another, so their
    summed time exceeds the time they take (issue 36's KernelBench L2 10 at its core)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_transpose(x)


def get_inputs():
    return [torch.randn(64, 64, 64, 64)]


def get_init_inputs():
    return [64, 64, 4, 2, 1]
