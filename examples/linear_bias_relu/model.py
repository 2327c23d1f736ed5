import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x @ W^T + b): an fp32 GEMM with a bias + ReLU epilogue."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


BATCH = 1024
IN_FEATURES = 1024
OUT_FEATURES = 1024


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
