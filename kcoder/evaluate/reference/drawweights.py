"""Weights the judge draws (issue 45 item 5): a candidate must be right for the module's
parameters and buffers as a user's trained model has them, not only as the constructor left them.

A GroupNorm weight of ones or a bias of zeros makes identities true that no trained model keeps
(a normalised group times a uniform weight, a mean of the bias alone): a kernel that relies on
them is right at initialisation only. So the reference process redraws every floating tensor of
the state (same shapes and dtypes) around its own values and loads the draw into both
implementations for some of the verification calls.
"""

from __future__ import annotations

from typing import Any

SPREAD = 0.5  # every element scaled by a factor in [1 - SPREAD, 1 + SPREAD) ...
NOISE = 0.1  # ... plus normal noise of this share of the tensor's root mean square (1 where it is all zeros)


def draw_state(torch: Any, state: dict[str, Any], seed: int) -> dict[str, Any]:
    """A state like `state` with every floating tensor redrawn: uniform tensors (ones, zeros) no
    longer uniform, signs of a tensor that was never negative (a variance, a scale) kept."""
    generator = torch.Generator().manual_seed(seed)
    drawn = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() == 0:
            drawn[name] = value
            continue
        x = value.detach().to("cpu", torch.float64)
        rms = float(x.square().mean().sqrt()) or 1.0
        factor = 1.0 + SPREAD * (2.0 * torch.rand(x.shape, generator=generator, dtype=torch.float64) - 1.0)
        y = x * factor + NOISE * rms * torch.randn(x.shape, generator=generator, dtype=torch.float64)
        if bool((x >= 0).all()):
            y = y.abs()
        drawn[name] = y.to(value.dtype)
    return drawn


def drawable(torch: Any, state: dict[str, Any]) -> int:
    """How many tensors of `state` a draw changes."""
    return sum(1 for v in state.values() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel())
