"""The physical floor (evaluate/floor.py, issue 40 item 6): a time under the least time in which
any correct implementation can read its inputs and write its outputs is refused on every
device; faster than the FLOP-based speed of light alone is not."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from kcoder.device_limits import DeviceLimits
from kcoder.evaluate.reference.floor import FLOOR_MARGIN, FLOOR_MARGIN_CPU, floor_figures, physical_floor, under_floor
from kcoder.evaluate.summary import record_timings
from kcoder.evaluate.timings import Timings
from kcoder.verdict import Verdict

MIB = 1 << 20


def _verdict(candidate_us: float, floor_us: float | None, device: str = "cpu", sol_us: float | None = None,
             eager_us: float = 100.0, reported_us: float | None = None) -> Verdict:
    v = Verdict(device=device, correct=True, n_input_sets=5, sol_us=sol_us, sol_bound="compute",
                reported_us=reported_us, floor_us=floor_us,
                floor_basis="0.5x the time to read 48.0 MiB of inputs once and write 16.0 MiB of outputs once at "
                            "5,200.0 GB/s measured")
    samples = {"eager": [eager_us] * 5, "compile": [0.9 * eager_us] * 5, "candidate": [candidate_us] * 5}
    record_timings(v, Timings(samples))
    return v


# --- the arithmetic -----------------------------------------------------------------------------
def test_the_floor_is_the_bytes_at_the_rate_times_the_margin():
    figures = physical_floor(48 * MIB, 16 * MIB, 5.2e12)
    assert FLOOR_MARGIN == 0.5
    assert figures["floor_us"] == pytest.approx(0.5 * 64 * MIB / 5.2e12 * 1e6)  # 6.45 us
    assert figures["floor_basis"] == ("0.5x the time to read 48.0 MiB of inputs once and write 16.0 MiB of "
                                      "outputs once at 5,200.0 GB/s measured")
    assert "1 argument the outputs ignore not counted" in physical_floor(1, 4, 1e9, ignored=1)["floor_basis"]
    assert "4 B of outputs" in physical_floor(0, 4, 1e9)["floor_basis"]


def test_the_rate_is_the_fastest_measured_up_to_the_footprint():
    cpu = DeviceLimits(device="cpu", copy_bytes_per_s=25e9, fp32_flops_per_s=1e11,
                       copy_curve={str(1 << 18): 63e9, str(1 << 20): 115e9, str(1 << 22): 97e9, str(1 << 30): 25e9},
                       size_rates={str(3 << 20): 130e9})
    assert cpu.fastest_copy_up_to(1 << 19) == 63e9  # only 256 KiB fits
    assert cpu.fastest_copy_up_to(2 << 20) == 115e9  # the cache-resident 1 MiB, not the 256 KiB below it
    assert cpu.fastest_copy_up_to(3 << 20) == 130e9  # a problem's own size measured faster
    assert cpu.fastest_copy_up_to(1 << 31) == 130e9  # a DRAM-sized problem: still the fastest below it
    assert cpu.fastest_copy_up_to(1000) == 130e9  # under every size measured: the fastest of all
    assert cpu.bandwidth_for(1 << 31) == 25e9  # the SOL's rate is unchanged (the largest size not above)
    gpu = DeviceLimits(device="GPU", copy_bytes_per_s=3.0e12, fp32_flops_per_s=5e13,
                       size_rates={str(8 * MIB): 2.1e12, str(64 * MIB): 3.4e12})
    assert gpu.fastest_copy_up_to(16 * MIB) == 3.0e12  # the 1 GiB ceiling is measured: it counts
    assert gpu.fastest_copy_up_to(64 * MIB) == 3.4e12  # outputs left in the L2 at 64 MiB


# Measured here (AMD EPYC, 2 threads, 1 MiB L2 per core, 32 MiB L3; kcoder.device_limits.measure_cpu
# on a quiet host): read+write bytes/s of a torch copy by working set.
EPYC_2T = {1 << 18: 82e9, 1 << 19: 87e9, 1 << 20: 124e9, 1 << 21: 128e9, 1 << 22: 152e9, 1 << 23: 158e9,
           1 << 24: 147e9, 1 << 25: 66e9, 1 << 26: 45e9, 1 << 27: 38e9, 1 << 28: 35e9, 1 << 29: 34e9, 1 << 30: 33e9}


def _epyc(**changes: float) -> DeviceLimits:
    curve = {str(size): rate for size, rate in EPYC_2T.items()}
    curve.update(changes)
    return DeviceLimits(device="AMD EPYC (2 threads)", copy_bytes_per_s=curve[str(1 << 30)], fp32_flops_per_s=1e11,
                        copy_curve=curve)


def test_the_cpu_rate_is_the_copy_at_the_problems_own_size():
    cpu = _epyc()
    assert cpu.copy_rate_at_size(64 * MIB + 4) == 45e9  # DRAM's side of the L3: not the 158 GB/s of 8 MiB
    assert cpu.copy_rate_at_size(48 * MIB) == 66e9  # between 32 and 64 MiB: the faster, the size below
    assert cpu.copy_rate_at_size(1 << 31) == 33e9  # past every size: the 1 GiB ceiling
    assert cpu.copy_rate_at_size(12 * MIB) == 158e9  # in the L3, still a cache's rate
    assert cpu.copy_rate_at_size(MIB // 2) == 158e9  # under the peak: the peak (torch's per-call cost)
    assert cpu.copy_rate_at_size(1000) == 158e9  # under every size measured: the fastest of all
    assert _epyc(**{str(1 << 28): 12e9}).copy_rate_at_size(300 * MIB) == 34e9  # a slow measurement outvoted
    cpu.size_rates = {str(40 * MIB): 70e9, str(20 * MIB): 150e9}  # problems' own sizes
    assert cpu.copy_rate_at_size(48 * MIB) == 70e9  # one between the curve's size below and it: counts
    assert cpu.copy_rate_at_size(128 * MIB) == 38e9  # those below the curve's size below: not
    assert cpu.fastest_copy_up_to(64 * MIB) == 158e9  # the rule before (the GPU's): a cache's rate


def test_a_large_cpu_problems_floor_is_at_its_own_sizes_rate():
    """32 MiB read and 32 MiB written: the floor moves them at the 64 MiB copy's rate, ~0.5 of the
    speed of light, where the fastest rate up to 64 MiB (8 MiB in the L3) had put it at ~0.14."""
    make = _draw((2048, 4096), (1,), (1,))  # Uses: x * 2 + z.sum(); y ignored
    figures = floor_figures(torch, Uses(), make, 3, _epyc(), 64 * MIB + 8, measure=False)
    assert figures["input_bytes"] == 32 * MIB + 4 and figures["output_bytes"] == 32 * MIB
    assert figures["floor_us"] == pytest.approx(FLOOR_MARGIN_CPU * (64 * MIB + 4) / 45e9 * 1e6)  # 447 us, not 212
    assert "at 45.0 GB/s measured" in figures["floor_basis"]
    faster_own = floor_figures(torch, Uses(), make, 3, _epyc(), 64 * MIB + 8, own_rate=52e9, measure=False)
    assert "at 52.0 GB/s measured" in faster_own["floor_basis"]  # the footprint's own rate, when faster
    gpu = DeviceLimits(device="GPU", copy_bytes_per_s=3.0e12, fp32_flops_per_s=5e13,
                       size_rates={str(8 * MIB): 3.4e12, str(256 * MIB): 3.6e12})
    on_gpu = floor_figures(torch, Uses(), make, 3, gpu, 64 * MIB + 8)  # the GPU's rule is unchanged
    assert "at 3,400.0 GB/s measured" in on_gpu["floor_basis"]


def test_the_rate_at_a_problems_size_is_measured_again_and_the_fastest_kept(tmp_path, monkeypatch):
    """A busy host's first measurement (too slow: the floor too high) does not stay: each
    evaluation measures the size again, and a faster rate replaces it, in the cache too."""
    from kcoder import device_limits as ceilings
    from kcoder.evaluate.reference import sol

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path))
    size = 64 * MIB + 4
    measured = iter([20e9, 41e9, 30e9])
    monkeypatch.setattr(sol, "copy_rate_at", lambda torch, device, nbytes, calls: next(measured))
    busy = _epyc()  # the whole curve measured while busy: a third of the quiet rates
    busy.copy_curve, busy.copy_bytes_per_s = {k: v / 3 for k, v in busy.copy_curve.items()}, 11e9
    make = _draw((2048, 4096), (1,), (1,))
    rates = [re.search(r"at ([\d,.]+) GB/s", floor_figures(torch, Uses(), make, 3, busy, size)["floor_basis"]).group(1)
             for _ in range(3)]
    assert rates == ["20.0", "41.0", "41.0"]  # 15 GB/s from the busy curve; then the fastest seen
    assert ceilings.load_limits(busy.device).size_rates == {str(size): 41e9}


def test_a_cached_cpu_entry_without_the_whole_curve_is_measured_again(tmp_path, monkeypatch):
    from kcoder import device_limits as ceilings

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path))
    key = ceilings.device_key(torch, "cpu")
    old = DeviceLimits(device=key, copy_bytes_per_s=25e9, fp32_flops_per_s=1e11,
                       copy_curve={str(1 << s): 50e9 for s in range(18, 31, 2)})  # x4 apart, as cached before
    ceilings.save_limits(old)
    whole = {str(size): 60e9 for size in ceilings.CPU_CURVE_BYTES}
    monkeypatch.setattr(ceilings, "measure_cpu", lambda torch: DeviceLimits(
        device="cpu", copy_bytes_per_s=25e9, fp32_flops_per_s=1e11, copy_curve=whole))
    limits, measured = ceilings.limits_for(torch, "cpu")
    assert measured and limits.copy_curve == whole
    assert ceilings.limits_for(torch, "cpu") == (limits, False)  # kept: not measured a third time


# --- what the reference process counts ----------------------------------------------------------
class Uses(nn.Module):
    def forward(self, x, y, z):
        return x * 2 + z.sum()


class Returns(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(64))

    def forward(self, x, y):
        return x, self.w, y * 3  # an argument and a parameter returned as they are cost nothing


class Drops(nn.Module):
    def forward(self, x, mask):
        return torch.dropout(x, 0.5, True) * mask  # random in forward; mask is the same every draw


def _floor(model: nn.Module, make: object, footprint: int = MIB) -> dict:
    limits = DeviceLimits(device="t", copy_bytes_per_s=1e9, fp32_flops_per_s=1e9)
    return floor_figures(torch, model, make, 3, limits, footprint)


def _draw(*shapes: tuple[int, ...]):
    def make(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        return [torch.randn(*shape) for shape in shapes]

    return make


def test_arguments_the_outputs_ignore_are_not_counted():
    figures = _floor(Uses(), _draw((256,), (1024,), (8,)))
    assert figures["input_bytes"] == (256 + 8) * 4 and figures["output_bytes"] == 256 * 4
    assert "1 argument the outputs ignore not counted" in figures["floor_basis"]
    assert figures["floor_us"] == pytest.approx(0.5 * (256 + 8 + 256) * 4 / 1e9 * 1e6)


def test_returned_arguments_and_parameters_cost_nothing():
    figures = _floor(Returns(), _draw((100,), (50,)))
    assert figures["output_bytes"] == 50 * 4  # y * 3 only
    assert figures["input_bytes"] == 50 * 4  # x is returned as it is: never read


def test_random_draws_in_forward_and_constant_arguments():
    def make(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        return [torch.randn(1000), torch.ones(1000)]

    figures = _floor(Drops(), make)
    assert figures["input_bytes"] == 1000 * 4  # x; the mask is the same every draw: a kernel may know it
    assert figures["output_bytes"] == 1000 * 4


def test_an_expanded_argument_is_its_storage():
    def make(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        return [torch.randn(1).expand(4096), torch.randn(1), torch.randn(8)]

    figures = _floor(Uses(), make)
    assert figures["input_bytes"] == (1 + 8) * 4


def test_inputs_that_differ_from_call_to_call_by_themselves_are_not_counted():
    """A problem whose calls on one input set do not agree (its get_inputs ignores the seed):
    nothing tells which argument matters, so only the outputs count."""
    figures = _floor(Uses(), lambda seed: [torch.randn(256), torch.randn(1), torch.randn(8)])
    assert figures["input_bytes"] == 0 and figures["output_bytes"] == 256 * 4


def test_a_problem_the_check_cannot_run_counts_only_its_outputs():
    calls = {"n": 0}

    class Flaky(nn.Module):
        def forward(self, x):
            calls["n"] += 1
            if calls["n"] > 1:
                raise RuntimeError("out of memory")
            return x + 1

    figures = _floor(Flaky(), _draw((256,)))
    assert figures["input_bytes"] == 0 and figures["output_bytes"] == 256 * 4


def test_the_fingerprint_samples_stay_inside_an_output_above_2_to_the_24_elements():
    """A float32 linspace rounded its last sample to numel here (16,777,219 -> 16,777,220): on the
    H100 a device-side assert that ended the reference process (KernelBench L1 11, L2 11)."""
    from kcoder.evaluate.reference.floor import SAMPLES, _fingerprint

    n = 2**24 + 4
    out = torch.zeros(n, dtype=torch.uint8)
    out[-1] = 7
    values = _fingerprint(torch, out)
    assert len(values) == 1 + SAMPLES and values[0] == 7.0 and values[-1] == 7.0


# --- the refusal --------------------------------------------------------------------------------
def test_under_floor_names_the_figures():
    reason = under_floor(3.1, 12.4, "0.5x the time to read 48.0 MiB of inputs once")
    assert reason == ("integrity: 3.1 us per call is under the physical floor of 12.4 us (0.5x the time to read "
                      "48.0 MiB of inputs once): the outputs cannot have been computed in that time")
    assert under_floor(12.4, 12.4, "") == "" and under_floor(3.1, None, "") == ""


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_time_under_the_floor_is_refused_on_every_device(device):
    v = _verdict(candidate_us=3.1, floor_us=12.4, device=device, sol_us=20.0)
    assert v.reward == -1 and not v.correct and v.stage == "timing"
    assert v.reason.startswith("integrity: 3.1 us per call is under the physical floor of 12.4 us (0.5x the time")
    assert "the outputs cannot have been computed in that time" in v.reason
    assert v.implausible == v.reason
    assert v.candidate_us == 3.1 and v.speedup_vs_eager  # the figures stay in the verdict


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_reported_time_under_the_floor_is_refused_on_every_device(device):
    """The judge's figure is honest (50 us) but the candidate's own timer said 3.1 us: a lie no
    correct implementation can tell, refused even where the clocks' gap alone is only a note."""
    v = _verdict(candidate_us=50.0, floor_us=12.4, device=device, reported_us=3.1)
    assert v.reward == -1 and not v.correct and v.stage == "timing"
    assert v.reason.startswith("integrity: the candidate's process reported 3.1 us per call, under the "
                               "physical floor of 12.4 us (0.5x"), v.reason
    assert v.reason.endswith("its own timer does not see all of its work")
    assert _verdict(candidate_us=50.0, floor_us=12.4, device=device, reported_us=12.5).correct
    assert _verdict(candidate_us=50.0, floor_us=12.4, reported_us=3.1, eager_us=10.0).correct  # floor wrong here


def test_just_above_the_floor_and_faster_than_light_is_accepted():
    v = _verdict(candidate_us=13.0, floor_us=12.4, device="cuda", sol_us=40.0)  # 308% of the SOL
    assert v.correct and v.stage == "done" and v.reward == 3 and not v.implausible
    assert "IMPLAUSIBLE" not in v.reason and "308% of the speed of light" in v.reason
    assert any(n.startswith("faster than the speed of light: 13.0 us is under 67% of the reference graph's "
                            "40.0 us (compute-bound") for n in v.notes), v.notes


def test_a_baseline_under_the_floor_means_the_floor_is_wrong():
    v = _verdict(candidate_us=3.1, floor_us=12.4, eager_us=10.0)  # the reference itself beat it
    assert v.correct and v.reward == 3, v.reason
    assert any(n.startswith("physical floor not applied: eager 10.0 us, torch.compile 9.0 us ran under its "
                            "12.4 us") for n in v.notes), v.notes


def test_no_floor_decides_nothing():
    assert _verdict(candidate_us=0.1, floor_us=None).reward == 3


def test_the_agent_never_keeps_a_time_under_the_floor():
    from kcoder.agent.loop import rank

    refused = _verdict(candidate_us=3.1, floor_us=12.4)
    honest = _verdict(candidate_us=50.0, floor_us=12.4)
    assert refused.implausible and not honest.implausible
    assert rank(honest) > rank(refused)
    assert Verdict.from_dict(refused.to_dict(), strict=True).floor_us == 12.4  # it travels as JSON


# --- honest figures are far from it -------------------------------------------------------------
# Judged on an H100 (bench/notes/kernels.md; copy 2.97 TB/s at 1 GiB): bytes read, bytes written,
# the fastest honest time seen (eager, torch.compile or the policy's kernel), in us.
H100_HONEST = {
    "47_Sum_reduction_over_a_dimension": (8.588e9, 2.1e6, 3050.0),
    "51_Argmax_over_a_dimension": (8.588e9, 4.2e6, 3230.0),
    "23_Softmax (4096 x 393216)": (6.44e9, 6.44e9, 4290.0 / 0.64),
    "34_InstanceNorm (7168 x 262144)": (7.515e9, 7.515e9, 5010.0 / 0.65),
}


@pytest.mark.parametrize("name", sorted(H100_HONEST))
def test_honest_h100_times_are_far_above_the_floor(name):
    read, written, honest_us = H100_HONEST[name]
    floor_us = physical_floor(int(read), int(written), 2.97e12)["floor_us"]
    assert honest_us > 1.8 * floor_us, (name, honest_us, floor_us)  # eager at 94% of copy speed: 1.9x


def test_the_examples_eager_times_on_this_cpu_are_far_above_the_floor():
    """Each example's reference, timed here, against its floor at the rate this CPU copies the
    problem's size at (sizes up to 64 MiB measured now): the reference is honest, so it must
    clear it."""
    import statistics
    import time

    from helpers import ROOT

    from kcoder.device_limits import _copy_rate
    from kcoder.evaluate.harness.loading import load_module
    from kcoder.evaluate.harness.verify import make_inputs

    curve = {str(1 << s): _copy_rate(torch, 1 << s) for s in range(18, 27)}
    limits = DeviceLimits(device="here", copy_bytes_per_s=min(curve.values()), fp32_flops_per_s=1e11,
                          copy_curve=curve)
    for example in sorted((ROOT / "examples").glob("*/model.py")):
        problem = load_module(example, f"floor_{example.parent.name}")
        model = problem.Model(*problem.get_init_inputs())
        figures = floor_figures(torch, model, lambda s, p=problem: make_inputs(p, s, "cpu"), 5, limits, 1 << 30)
        times = []
        for seed in range(3):
            inputs = make_inputs(problem, seed, "cpu")
            started = time.perf_counter()
            with torch.no_grad():
                model(*inputs)
            times.append((time.perf_counter() - started) * 1e6)
        eager_us = statistics.median(times)
        assert eager_us > 2 * figures["floor_us"], (example.parent.name, eager_us, figures)
