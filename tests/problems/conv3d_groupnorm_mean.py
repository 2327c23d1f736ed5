import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench L2 23_Conv3d_GroupNorm_Mean at a smaller batch: the mean of group-normalized
    values is zero up to rounding (pure cancellation), so every summation order's float32
    answer is different noise (issue 36)."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = self.group_norm(x)
        return x.mean(dim=[1, 2, 3, 4])


def get_inputs():
    return [torch.rand(32, 3, 16, 32, 32)]


def get_init_inputs():
    return [3, 16, 3, 8]
