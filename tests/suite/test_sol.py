"""Speed of light in verdicts and in the reference-only measurement (cpu target): the figures
follow from the problem's bytes and FLOPs and the device's measured ceilings, as cached."""

from __future__ import annotations

import pytest
from helpers import PROBLEMS, ROOT, fast_options

from kcoder.device_limits import DeviceLimits, load_limits


def cached_cpu_limits() -> DeviceLimits:
    """The ceilings the reference process measured and cached (same threads as this process)."""
    import torch

    from kcoder.device_limits import device_key

    limits = load_limits(device_key(torch, "cpu"))
    assert limits is not None and limits.copy_curve, "the evaluation should have cached the cpu ceilings"
    return limits


@pytest.mark.slow
def test_pointwise_example_sol_is_bytes_over_measured_bandwidth(example_verdict):
    v = example_verdict(ROOT / "examples" / "elementwise_chain")  # the verdict test_examples reads too
    assert v.correct and v.stage == "done", v.reason
    rows, features = 2048, 4096
    # x in, out out (fp32), weight and bias: what any implementation must move at least
    assert v.min_bytes == 2 * rows * features * 4 + 2 * features * 4
    assert v.flops == 0 and v.sol_bound == "memory"  # elementwise work is not matmul FLOPs
    limits = cached_cpu_limits()
    device_bound_us = v.min_bytes / limits.bandwidth_for(v.min_bytes) * 1e6
    if "at the problem's size" in v.sol_ceilings:  # the copy at its own size was faster: a lower bound
        assert v.sol_us < device_bound_us
    else:
        assert v.sol_us == pytest.approx(device_bound_us, rel=1e-6)
    assert v.eager_sol_fraction == pytest.approx(v.sol_us / v.eager_us, rel=1e-3)
    assert v.candidate_sol_fraction == pytest.approx(v.sol_us / v.candidate_us, rel=1e-3)
    assert v.compile_sol_fraction == pytest.approx(v.sol_us / v.compile_us, rel=1e-3)
    assert "of the speed of light" in v.reason
    # the physical floor: x read and the output written once (weight and bias may be folded)
    assert f"read {rows * features * 4 / 2**20:.1f} MiB of inputs once and write 32.0 MiB of outputs" in v.floor_basis
    assert v.floor_us and v.candidate_us > 2 * v.floor_us, (v.candidate_us, v.floor_us, v.floor_basis)
    print(f"FLOOR elementwise_chain: {v.floor_us:.1f} us ({v.floor_basis}); candidate {v.candidate_us:.1f} us, "
          f"eager {v.eager_us:.1f} us")


def test_reference_only_measurement_counts_matmul_flops():
    from kcoder.evaluate.baseline import measure_reference

    fig = measure_reference(PROBLEMS / "matmul_small.py", fast_options(compile_baseline=False))
    m, k, n = 128, 256, 64
    assert fig.flops == 2 * m * k * n
    assert fig.min_bytes == (m * k + k * n + m * n) * 4
    limits = cached_cpu_limits()
    memory_s = fig.min_bytes / limits.bandwidth_for(fig.min_bytes)
    compute_s = fig.flops / limits.fp32_flops_per_s
    assert fig.sol_us == pytest.approx(max(memory_s, compute_s) * 1e6, rel=1e-6)
    assert fig.eager_us > 0 and fig.compile_us is None and fig.compile_headroom is None


def test_ceilings_by_working_set_and_precision():
    limits = DeviceLimits(device="cpu", copy_bytes_per_s=10e9, fp32_flops_per_s=1e11, bf16_flops_per_s=4e11,
                          copy_curve={str(1 << 20): 80e9, str(1 << 24): 40e9, str(1 << 30): 10e9})
    assert limits.bandwidth_for(3 << 20) == 80e9  # fits where 1 MiB did: at least that rate
    assert limits.bandwidth_for(1 << 24) == 40e9
    assert limits.bandwidth_for(1 << 31) == 10e9
    assert limits.bandwidth_for(1000) == 80e9  # below the smallest measured: its rate
    assert limits.flops_per_s("strict") == 1e11 and limits.flops_per_s("relaxed") == 4e11
    gpu = DeviceLimits(device="GPU", copy_bytes_per_s=4e12, fp32_flops_per_s=5e13, tf32_flops_per_s=4e14)
    assert gpu.bandwidth_for(1 << 20) == 4e12 and gpu.flops_per_s("relaxed") == 4e14
