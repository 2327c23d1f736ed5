"""A copy at a multi-GB size: eager's x.clone() runs at the device's copy rate, so an honest
vectorized copy kernel must be timed like it (the judge's fairness check, issue 36)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.randn(4096, 262144)]  # 4 GiB of fp32 read, 4 GiB written


def get_init_inputs():
    return []
