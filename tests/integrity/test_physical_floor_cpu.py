"""Faster than the physical floor is refused on the cpu target (issue 40, item 6). On 3b458dd a
time past the speed of light was only a GPU finding: on the cpu target "653%" and "511% of the
speed of light" (lazy outputs; unwritten memory from every timed call) were rewarded.

The reference process's own figures (its op_sol, as the judge asks for them) go through the
judge's side (record_sol, record_timings) with the times those candidates reported."""

from __future__ import annotations

import json
import re

import pytest
from helpers import PROBLEMS

from kcoder.device_limits import DeviceLimits


@pytest.fixture
def figures(tmp_path, monkeypatch):
    """op_sol of tests/problems/scale_add.py (x, y in; relu(x * 2 + y) out; 2 MiB each) with
    ceilings shaped like a CPU's (a cache-resident peak, DRAM's rate at 1 GiB)."""
    import torch

    from kcoder import device_limits as ceilings
    from kcoder.evaluate.harness.loading import load_module
    from kcoder.evaluate.options import EvalOptions
    from kcoder.evaluate.reference import server as reference

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path))
    cpu = DeviceLimits(device="cpu like", copy_bytes_per_s=25e9, fp32_flops_per_s=1e11,
                       copy_curve={str(1 << 18): 63e9, str(1 << 20): 115e9, str(1 << 22): 97e9, str(1 << 30): 25e9})
    monkeypatch.setattr(ceilings, "limits_for", lambda torch, device: (cpu, False))
    server = reference.ReferenceServer.__new__(reference.ReferenceServer)
    server.torch, server.device, server.options = torch, "cpu", EvalOptions()
    server.problem = load_module(PROBLEMS / "scale_add.py", "floor_problem")
    server.model = server.problem.Model(*server.problem.get_init_inputs())
    return json.loads(json.dumps(server.op_sol()))  # as the judge receives it


def _judged(figures: dict, candidate_us: float):
    from kcoder.evaluate.reference.sol import record_sol
    from kcoder.evaluate.summary import record_timings
    from kcoder.evaluate.timings import Timings
    from kcoder.verdict import Verdict

    v = Verdict(device="cpu", correct=True, n_input_sets=5)
    record_sol(v, figures)
    samples = {"eager": [2000.0] * 5, "compile": [1500.0] * 5, "candidate": [candidate_us] * 5}
    record_timings(v, Timings(samples))
    return v


def test_the_reference_process_reports_the_floor(figures):
    assert "floor_error" not in figures and "sol_error" not in figures, figures
    two_mib = 512 * 1024 * 4
    assert figures["input_bytes"] == 2 * two_mib and figures["output_bytes"] == two_mib
    # the fastest copy measured up to the problem's 6 MiB: the curve's 1 MiB peak, or faster at its own size
    rate = float(re.search(r"at ([\d,.]+) GB/s measured", figures["floor_basis"]).group(1).replace(",", "")) * 1e9
    assert rate >= 115e9
    assert figures["floor_us"] == pytest.approx(0.5 * 3 * two_mib / rate * 1e6, rel=1e-3)
    assert f"read {2 * two_mib / 2**20:.1f} MiB of inputs once and write 2.0 MiB of outputs once" \
        in figures["floor_basis"]


@pytest.mark.parametrize("share_of_sol", [6.53, 5.11])
def test_what_was_rewarded_faster_than_light_is_refused(figures, share_of_sol):
    v = _judged(figures, candidate_us=figures["sol_us"] / share_of_sol)
    assert v.reward == -1 and not v.correct and v.stage == "timing", v.reason
    assert v.reason.startswith("integrity: ") and "under the physical floor of" in v.reason
    assert "the outputs cannot have been computed in that time" in v.reason


def test_an_honest_time_at_the_copy_rate_is_accepted(figures):
    v = _judged(figures, candidate_us=2 * figures["floor_us"])  # every byte moved at the fastest copy
    assert v.correct and v.stage == "done" and v.reward == 3, v.reason
