"""A speed of light that is a bound: the copy ceiling measured at the problem's own size
(evaluate/sol.py copy_rate_at, timed as the timing loop times a call) replaces the device's
1 GiB copy when it is faster, as it is for data that stays in a cache (CPU here)."""

from __future__ import annotations

import math

import pytest
from helpers import PROBLEMS

from kcoder.device_limits import DeviceLimits
from kcoder.evaluate.reference.sol import copy_rate_at, speed_of_light

WORK = {"flops": 0.0, "min_bytes": 8 << 20}


def _limits(copy_bytes_per_s: float) -> DeviceLimits:
    return DeviceLimits(device="test device", copy_bytes_per_s=copy_bytes_per_s, fp32_flops_per_s=1e12)


def test_the_faster_copy_ceiling_sets_the_sol():
    slow_device = speed_of_light(WORK, _limits(1e9), "strict", own_size_rate=4e9)
    assert slow_device["sol_us"] == pytest.approx(WORK["min_bytes"] / 4e9 * 1e6)
    assert "at the problem's size (8.0 MiB)" in slow_device["sol_ceilings"]
    fast_device = speed_of_light(WORK, _limits(8e9), "strict", own_size_rate=4e9)
    assert fast_device["sol_us"] == pytest.approx(WORK["min_bytes"] / 8e9 * 1e6)
    assert "problem's size" not in fast_device["sol_ceilings"]


def test_copy_rate_at_the_problems_size_is_measured_on_the_cpu():
    import torch

    rate = copy_rate_at(torch, "cpu", 1 << 20, calls=5)
    assert rate is not None and math.isfinite(rate) and rate > 1e6  # bytes/s: any machine copies 1 MB/s
    assert copy_rate_at(torch, "cpu", 0) is None
    assert copy_rate_at(torch, "cpu", (1 << 30) + 2) is None  # the device's own 1 GiB copy stands there


def test_the_problem_size_rate_is_kept_with_the_device_ceilings(tmp_path, monkeypatch):
    import torch

    from kcoder.device_limits import load_limits
    from kcoder.evaluate.reference import sol

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path))
    limits = _limits(1e9)
    first = sol.own_size_rate(torch, "cpu", limits, 1 << 20)
    assert first and load_limits("test device").size_rates == {str(1 << 20): first}
    monkeypatch.setattr(sol, "copy_rate_at", lambda *a, **k: pytest.fail("measured again"))
    assert sol.own_size_rate(torch, "cpu", load_limits("test device"), 1 << 20) == first


def test_the_reference_uses_the_problem_size_ceiling_when_faster(tmp_path, monkeypatch):
    """The reference process's SOL request, with a device ceiling far below anything a copy of
    the problem's 4 MiB reaches: the problem-size measurement takes over, so the SOL stays a
    bound (an eager call cannot beat it)."""
    import torch

    from kcoder import device_limits as ceilings
    from kcoder.evaluate.harness.loading import load_module
    from kcoder.evaluate.options import EvalOptions
    from kcoder.evaluate.reference import server as reference

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path))
    slow = DeviceLimits(device="cpu slow", copy_bytes_per_s=1e6, fp32_flops_per_s=1e15)  # 1 MB/s
    monkeypatch.setattr(ceilings, "limits_for", lambda torch, device: (slow, False))
    server = reference.ReferenceServer.__new__(reference.ReferenceServer)
    server.torch, server.device, server.options = torch, "cpu", EvalOptions()
    server.problem = load_module(PROBLEMS / "scale_add.py", "sol_ceiling_problem")
    server.model = server.problem.Model(*server.problem.get_init_inputs())
    figures = server.op_sol()
    assert "sol_error" not in figures, figures
    assert figures["min_bytes"] == 3 * 512 * 1024 * 4
    assert "at the problem's size" in figures["sol_ceilings"]
    assert figures["sol_us"] < figures["min_bytes"] / slow.copy_bytes_per_s * 1e6 / 10


def test_the_suite_counts_out_of_reach_apart_from_failures():
    from kcoder.suite.metrics import row, summarize
    from kcoder.suite.progress import result_line
    from kcoder.suite.report import markdown

    good = {"name": "a", "status": "accepted", "verdict": {"compiled": True, "correct": True, "speedup_vs_eager": 2.0,
                                                          "speedup_vs_compile": 1.5}}
    bad = {"name": "b", "status": "rejected", "verdict": {"compiled": True, "correct": False}}
    limit = {"name": "c", "status": "out_of_reach", "reason": "torch.compile is at the hardware limit"}
    summary = summarize([row(r) for r in (good, bad, limit)])
    assert summary["problems"] == 3 and summary["out_of_reach"] == 1
    assert summary["correct_pct"] == 50.0 and summary["compiled_pct"] == 100.0  # over the two judged
    assert summary["statuses"] == {"accepted": 1, "rejected": 1, "out_of_reach": 1}
    text = markdown({**summary, "mode": "eval"}, [row(r) for r in (good, bad, limit)])
    assert "| out of reach (torch.compile at the hardware limit; not counted below) | 1 |" in text
    assert "| correct | 50.0% (1/2) |" in text
    assert result_line(limit).startswith("– c: out_of_reach")
