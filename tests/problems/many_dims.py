import torch
import torch.nn as nn


class Model(nn.Module):
    """out = relu(x * scale + y) on 256 elements in 56 dimensions: the kernel takes microseconds,
    while the judge's back-to-back batch changes one input element per call through an index of
    56 coordinates (verify.perturb), which costs far more. The outer clock's calibration batch
    must account for that work; a rule without it accuses the honest candidate (issue 27)."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + y)


SHAPE = (2,) * 8 + (1,) * 48


def get_inputs():
    return [torch.randn(*SHAPE), torch.randn(*SHAPE)]


def get_init_inputs():
    return [2.0]
