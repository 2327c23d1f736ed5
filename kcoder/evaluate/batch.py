"""Pieces of a back-to-back batch in the candidate's process (worker.op_batch), which the judge
times with its own clock (crosscheck.py): the module that stands in for the candidate in a
calibration batch, and the GPU gate that holds the device back while the host queues calls."""

from __future__ import annotations

from typing import Any

DEFAULT_CLOCK_KHZ = 1_980_000  # an H100's boost clock, where the device does not say its own


def calibration_module(torch: Any) -> Any:
    """A module that computes nothing: called exactly as the candidate is (Module.__call__ on
    the perturbed inputs), so a batch of it costs what the harness adds to every call."""

    class Calibration(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return args[0] if args else None

    return Calibration()


def gate_cycles(torch: Any, seconds: float) -> int:
    """GPU clock cycles that last at least `seconds` (the clock rate is the device's highest)."""
    khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or DEFAULT_CLOCK_KHZ
    return int(seconds * khz * 1e3)


def gate(torch: Any, device: str, seconds: float) -> None:
    """Keep the current CUDA stream busy for `seconds`: work queued after this waits for it."""
    if device == "cuda" and seconds > 0:
        torch.cuda._sleep(gate_cycles(torch, seconds))
