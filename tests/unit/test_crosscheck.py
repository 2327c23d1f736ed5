"""The outer clock's decisions (evaluate/crosscheck.py, issue 27), driven by batch times from a
model of a device: the host's work per call (the candidate's and the harness's), the device's,
the messages' round trip, and a GPU gate. The figures of the first case are those of the
honest conv_bn_relu candidate the old rule accused on an H100 (16 us reported, 550 us per call
by the judge's clock)."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from kcoder.evaluate.crosscheck import BatchTime, OuterClock

OLD_FACTOR, OLD_SLACK_US = 3.0, 100.0  # the rule before issue 27: (batch - empty round trip) / n


class Accused(Exception):
    pass


@dataclass
class Device:
    """Per-call seconds: the candidate's host work and device work, the harness's host and device
    work (one perturbed element, the module call), and a round trip. `syncs`: the candidate
    waits for the GPU inside every call, so the host can never run ahead of it."""

    host: float
    device: float
    harness_host: float = 40e-6
    harness_device: float = 6e-6
    rtt: float = 300e-6
    syncs: bool = False

    def batch(self, n: int, gate_s: float, calibration: bool) -> BatchTime:
        host = n * (self.harness_host + (0 if calibration else self.host))
        device = n * (self.harness_device + (0 if calibration else self.device))
        if self.syncs and not calibration:  # serialized: the gate is waited for by the first call
            done = gate_s + n * (self.harness_host + self.host + self.harness_device + self.device)
            return BatchTime(n, done, done + self.rtt)
        if gate_s:
            return BatchTime(n, host, max(gate_s, host) + device + self.rtt)
        return BatchTime(n, host, max(host, device) + self.rtt)


class ScriptedClock(OuterClock):
    def __init__(self, device: Device, claimed_us: float, target: str = "cuda") -> None:
        self.verdict = SimpleNamespace(notes=[])
        judge = SimpleNamespace(options=SimpleNamespace(device=target), verdict=self.verdict, fail=self._fail)
        super().__init__(judge, claimed_us, deadline=0.0)
        self.model, self.batches = device, []

    def _fail(self, stage, reason):
        raise Accused(reason)

    def batch(self, n, gate_s=0.0, calibration=False):
        self.batches.append((n, gate_s, calibration))
        return self.model.batch(n, gate_s, calibration)


def old_rule_accuses(device: Device, claimed_us: float) -> bool:
    n = max(10, min(200, int(0.2e6 / claimed_us)))
    per_call_us = (device.batch(n, 0.0, False).done_s - device.rtt) / n * 1e6
    return per_call_us > OLD_FACTOR * claimed_us + OLD_SLACK_US


def test_host_bound_honest_gpu_candidate_is_not_accused():
    cudnn = Device(host=510e-6, device=16e-6)  # a library call's host work, a 16 us kernel
    assert old_rule_accuses(cudnn, 16.0)
    clock = ScriptedClock(cudnn, 16.0)
    clock.check()  # no accusation
    assert any(gate_s for _, gate_s, _ in clock.batches), "the gated batch was not used"
    plain = [b for b in clock.batches if not b[1] and not b[2]]
    assert len(plain) == 1, "a host-bound batch is not retried: only the gate can tell"
    note = clock.verdict.notes[-1]
    assert note.startswith("judge's clock: ") and "GPU gate: device time" in note, note
    per_call = float(note.split()[2])
    assert 14.0 < per_call < 18.0, note


def test_host_bound_cheat_is_caught_through_the_gate():
    cheat = Device(host=2000e-6, device=900e-6)  # honest output, device time reported at a third
    clock = ScriptedClock(cheat, 300.0)
    with pytest.raises(Accused, match="the judge's own clock measured 900.0 us per call") as info:
        clock.check()
    assert "GPU gate" in str(info.value)


def test_device_bound_cheat_is_caught_without_a_gate():
    clock = ScriptedClock(Device(host=20e-6, device=1000e-6), 333.0)
    with pytest.raises(Accused, match="timer tampering"):
        clock.check()
    assert not any(gate_s for _, gate_s, _ in clock.batches)


def test_cpu_cheat_reporting_a_third_is_caught():
    cpu = Device(host=300e-6, device=0.0, harness_device=0.0)  # on the cpu target the host's time is the time
    with pytest.raises(Accused):
        ScriptedClock(cpu, 100.0, target="cpu").check()
    ScriptedClock(cpu, 300.0, target="cpu").check()  # the same work, reported truly


def test_harness_work_is_taken_off_on_the_cpu():
    """A tiny kernel behind a costly perturbation (many_dims.py's case): not accused."""
    cpu = Device(host=8e-6, device=0.0, harness_host=900e-6, harness_device=0.0)
    assert old_rule_accuses(cpu, 8.0)
    clock = ScriptedClock(cpu, 8.0, target="cpu")
    clock.check()
    assert "after the batch's own" in clock.verdict.notes[-1]


def test_a_candidate_that_waits_for_the_gpu_is_not_accused_on_a_guess():
    """The host cannot queue ahead (a sync in every call): no like-for-like figure, no accusation,
    and the note says so."""
    clock = ScriptedClock(Device(host=500e-6, device=16e-6, syncs=True), 16.0)
    clock.check()
    assert "inconclusive" in clock.verdict.notes[-1]


def test_gate_jitter_is_allowed_for():
    """Two calibrations that disagree by 2 ms widen the allowance; an honest kernel passes."""

    class Jittery(Device):
        calls = 0

        def batch(self, n, gate_s, calibration):
            out = super().batch(n, gate_s, calibration)
            if gate_s and calibration:
                Jittery.calls += 1
                out = BatchTime(n, out.queued_s, out.done_s + (2e-3 if Jittery.calls % 2 else 0.0))
            return out

    clock = ScriptedClock(Jittery(host=510e-6, device=16e-6), 16.0)
    clock.check()
    assert "±" in clock.verdict.notes[-1]
