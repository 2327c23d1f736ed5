"""The judge's own clock: the figure of every implementation (issue 40).

Once a candidate's code runs, nothing in its process is trusted: not a timer, not a flag, not a
figure it reports. So the verdict's figures come from here, the judge's process, and every
implementation (the candidate in its process; eager and torch.compile in the reference
process) is timed the same way: batches of calls (batchrun.py), each call on inputs that
depend on a key drawn when the clock starts, each output committed (a checksum of every byte)
before the reply that stops the clock. On the GPU the process queues the whole batch behind a
gate page the judge writes, so the clock sees the device's work, not the host's launches; a
process that cannot queue its calls ahead (it waits for the GPU inside a call) is timed with
its host in the loop, which is what such an implementation costs.

What a batch costs besides the implementation (the inputs' factors, the L2 flush, the
commitments, the messages) is measured in the reference process alone, while no candidate
process is alive (a calibration: batches of a module that computes nothing and returns tensors
shaped as the output, at two sizes, a line under their fastest runs). Each sample is a batch less
the smaller of that line's cost at its size and the fastest of the same process's own calibration
batches at that size, spread among its samples: a candidate that slows its own
calibration down only makes the line count, and a reference harness slower than the candidate's,
or a host that was slower a moment before, never takes off more than the candidate paid.
"""

from __future__ import annotations

import mmap
import os
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kcoder.evaluate.harness.channel import ChannelError, Peer

QUEUE_WAIT_S = 2.0  # a process that has not queued its batch by then waits on the GPU itself
HOST_BOUND_WAIT_S = 0.05  # and once one of its batches did, the next ones are not waited for as long
MAX_CALLS = {"cuda": 64, "cpu": 512}  # cuda: the launches of a batch must fit the device's queue
TARGET_S = {"cuda": 0.01, "cpu": 0.05}  # the implementation's own time per batch
KEEP_BYTES = 2**30  # a batch's outputs are kept for the judge's drawn checks (in both processes)
CALIBRATION_REPEATS = 3
MIN_RESOLUTION_S = 1e-6  # the least a batch's own work reads as (a sample is never zero)
# Work at the resolution and under this share of its whole batch is too little to measure: a
# figure made of such samples claims no speed-up (summary.record_timings). The share keeps a
# noisy host's calibration spread (ms on 2 shared cores) from taking an honest 5 ms kernel's.
NEGLIGIBLE_SHARE = 0.02
PROBE_CALLS = 4  # a first batch sizes the batches of an implementation
SAMPLES = 5  # the candidate's; each with one drawn call checked (5 more checks than input sets)
BAND = 0.10  # the judge's clock may exceed an in-process figure by this share ...
SLACK_US = 3.0  # ... plus this, ...
HARNESS_SHARE = 0.5  # ... plus this share of the batch's own per-call cost, before it is called false


@dataclass
class Batch:
    """One batch by the judge's clock."""

    n: int
    seconds: float
    seed: int
    key: int
    commitments: list[list[int]]
    host_bound: bool = False


@dataclass
class Calibration:
    """A batch's own seconds at n calls: fixed + n * per_call, a line under the fastest of the
    calibration batches at every size measured; `spread` their run-to-run variation (seconds)."""

    fixed_s: float
    per_call_s: float
    spread_s: float

    def seconds(self, n: int) -> float:
        return self.fixed_s + n * self.per_call_s

    def to_list(self) -> list[float]:
        return [self.fixed_s, self.per_call_s, self.spread_s]

    @staticmethod
    def from_value(value: Any) -> Calibration | None:
        """A cached calibration, or None when it is not three finite non-negative numbers."""
        if (isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value)
                and all(0 <= v < 3600 for v in value)):
            return Calibration(*map(float, value))
        return None


def fit_calibration(fastest: dict[int, float], spread_s: float) -> Calibration:
    """The line under every size's fastest calibration batch (never above one: the part taken
    off a sample is never more than the batch itself was seen to cost)."""
    lo, hi = min(fastest), max(fastest)
    per_call = max(0.0, (fastest[hi] - fastest[lo]) / (hi - lo)) if hi > lo else 0.0
    fixed = max(0.0, min(seconds - per_call * n for n, seconds in fastest.items()))
    return Calibration(fixed, per_call, spread_s)


@dataclass
class Figure:
    """An implementation's per-call samples by the judge's clock, and how they were taken."""

    samples: list[float] = field(default_factory=list)
    n: int = 0
    host_bound: bool = False
    at_resolution: int = 0  # samples whose own work was within the calibration's spread
    negligible: int = 0  # samples whose own work was within the resolution and under 2% of its batch
    harness_us: float = 0.0  # the batch's own cost per call (the calibration's line)
    taken_off_us: float = 0.0  # per call, what was taken off every sample (the line's or the process's own)


class GatePage:
    """The judge's end of a gate page (batchrun.DeviceGate): shared memory it writes to start a
    queued batch. The process that waits on it can read it too: it holds no secret before the
    judge writes the key, and the key is what makes the inputs."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("kcoder-gate", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, 4096)
        self.map = mmap.mmap(self.fd, 4096)
        self.generation = 0
        self.process: Any = None  # the process it was handed to (judgetiming.gate_page)

    def next(self) -> int:
        self.generation += 1
        return self.generation

    def open(self, key: int, generation: int) -> None:
        struct.pack_into("<q", self.map, 8, key)  # the key first: the device reads it after the gate opens
        struct.pack_into("<I", self.map, 0, generation)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


@dataclass
class Endpoint:
    """A process the judge times batches in, with the judge's handling of its failures."""

    peer: Peer
    fail: Callable[[ChannelError], Any]  # raises (the judge's Stop)
    expect: Callable[[dict[str, Any], str], dict[str, Any]]  # the reply checked for its key, or raises
    page: GatePage | None = None  # cuda only


class BatchClock:
    """Times batches of one implementation in one process."""

    def __init__(self, endpoint: Endpoint, cuda: bool, deadline: float, impl: str = "") -> None:
        self.ep, self.cuda, self.deadline, self.impl = endpoint, cuda, deadline, impl
        self.host_bound = False  # a batch of this implementation waited on the GPU within a call

    def left(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def batch(self, n: int, calibration: bool) -> Batch:
        ep, seed, key = self.ep, secrets.randbelow(2**31 - 1) + 1, secrets.randbits(32)
        generation = ep.page.next() if self.cuda and ep.page is not None else 0
        try:
            ep.peer.send(op="batch", seed=seed, n=n, calibration=calibration, impl=self.impl, generation=generation)
            host_bound = False
            if self.cuda:
                wait_s = HOST_BOUND_WAIT_S if self.host_bound and not calibration else QUEUE_WAIT_S
                try:
                    queued: dict[str, Any] | None = ep.peer.receive(min(wait_s, self.left()), watch=False)
                except ChannelError as exc:
                    if exc.kind != "timeout":
                        raise
                    queued, host_bound = None, True  # it waits on the GPU within a call: open the gate
                    self.host_bound |= not calibration
                started = time.monotonic()
                assert ep.page is not None
                ep.page.open(key, generation)
                ep.expect(queued if queued is not None else ep.peer.receive(self.left()), "queued")
            else:
                ep.expect(ep.peer.receive(self.left()), "queued")
                started = time.monotonic()
                ep.peer.send(op="go", key=key)
            done = ep.peer.receive(self.left(), watch=False)
            seconds = time.monotonic() - started
        except ChannelError as exc:
            ep.fail(exc)
            raise  # unreachable: fail() raises
        done = ep.expect(done, "done")
        return Batch(n, seconds, seed, key, _commitments(done.get("commitments"), n), host_bound)

    def calibrate(self, keep_bytes: int = 1) -> Calibration:
        """The batch's own cost (run in the reference process, no candidate alive): one call, then
        a size whose batch lasts about TARGET_S, each CALIBRATION_REPEATS times; a line under
        their fastest runs, and the smaller of their spreads (the clock's resolution).
        `keep_bytes`: what a batch holds per call (an arena holds every call's inputs and output:
        mse_loss's 128 MiB a call made a 512-call calibration batch of 64 GiB)."""
        device = "cuda" if self.cuda else "cpu"
        fastest, spreads = {}, []
        for n in (1, 0):
            if n == 0:  # the second size, from the first's time (an upper bound of its per-call cost)
                n = max(4, min(MAX_CALLS[device], int(4 * TARGET_S[device] / max(fastest[1], 1e-6))))
                n = max(2, min(n, KEEP_BYTES // max(keep_bytes, 1)))
            times = sorted(self.batch(n, calibration=True).seconds for _ in range(CALIBRATION_REPEATS))
            fastest[n] = times[0]
            spreads.append(times[1] - times[0])
        return fit_calibration(fastest, min(spreads))

    def hint_us(self, calibration: Calibration) -> float:
        """The implementation's time per call from a small batch (sizes the batches): its own,
        but never under a quarter of the whole batch's per call (noise can make its own look like
        nothing, and a batch sized for nothing would keep thousands of outputs)."""
        # Two probes, the faster counts: the first pays what happens once (a fresh arena mapped and
        # faulted in, a pool of threads woken): a cpu probe of 4 calls once read 81 ms where the
        # calls took 0.7 ms each, its batches were sized to 2 calls, and each batch's own start
        # (the thaw, cold caches) then doubled the candidate's figure (0.20x vs compile, not 0.9x).
        run = min((self.batch(PROBE_CALLS, calibration=False) for _ in range(2)), key=lambda b: b.seconds)
        own = (run.seconds - calibration.seconds(PROBE_CALLS)) / PROBE_CALLS * 1e6
        return max(own, run.seconds / PROBE_CALLS * 1e6 / 4, 1.0)

    def figure(self, calibration: Calibration, keep_bytes: int, samples: int = SAMPLES, budget_s: float = 1.0,
               on_batch: Callable[[Batch], None] | None = None) -> Figure:
        """`samples` per-call samples, each a batch less what is taken off (see the module);
        `keep_bytes` an output's bytes (the batch keeps every output until the judge has drawn its
        checks); `budget_s` the implementation's own seconds over every batch, at most (a batch
        lasts at most TARGET_S). `on_batch` sees every batch: the judge checks drawn calls there."""
        device = "cuda" if self.cuda else "cpu"
        target_s = min(TARGET_S[device], budget_s / (samples + 1))
        n = int(target_s * 1e6 / self.hint_us(calibration))
        n = max(1, min(n, MAX_CALLS[device], max(1, KEEP_BYTES // max(keep_bytes, 1))))
        figure = Figure(n=n, harness_us=calibration.per_call_s * 1e6)
        # What is taken off: the calibrated line, or this process's own batch cost at n when that is
        # smaller (a process whose harness runs faster than the reference's must not have more taken
        # off than it paid; one that slows its own calibration down only makes the line count). Its
        # own calibration batches are spread among the samples and the fastest counts: a host that got
        # faster (or slower) while they ran cannot leave more taken off than any sample's batch paid
        # (a cpu verdict once took 22 ms per call off a 27.6 ms batch measured a moment later at 22.5).
        own, runs = [], []
        for k in range(samples):
            if k % 2 == 0:  # before the first, the middle and the last sample (of 5): 3 batches, as before
                own.append(self.batch(n, calibration=True).seconds)
            run = self.batch(n, calibration=False)
            if on_batch is not None:  # before the next batch: the process keeps one batch's outputs
                on_batch(run)
            runs.append(run)
        taken_off = min(calibration.seconds(n), min(own))
        figure.taken_off_us = taken_off / n * 1e6
        # Work under the clock's resolution (the calibration's spread) reads as that resolution:
        # the figure says "no more than this", never zero.
        resolution = max(calibration.spread_s, MIN_RESOLUTION_S)
        for run in runs:
            figure.host_bound |= run.host_bound
            work = run.seconds - taken_off
            figure.samples.append(max(work, resolution) / n * 1e6)
            figure.at_resolution += work <= resolution
            figure.negligible += work <= resolution and work <= NEGLIGIBLE_SHARE * run.seconds
        return figure


def _commitments(value: Any, n: int) -> list[list[int]]:
    """Every call's checksums as the process sent them (checked later against outputs the
    reference process reads itself: a malformed list is simply one that will not match)."""
    if not isinstance(value, list) or len(value) != n:
        return [[] for _ in range(n)]
    return [[int(v) for v in row if isinstance(v, int)] if isinstance(row, list) else [] for row in value]


def disagreement(judge_samples: list[float], reported_us: float, host_bound: bool, harness_us: float = 0.0) -> str:
    """A reason to refuse when the judge's clock measured more than the candidate's process
    reported for the same work beyond the noise band (its fastest sample against the band, so a
    busy host never accuses); "" otherwise. The band: BAND of the report, SLACK_US, and half of
    the batch's own per-call cost (`harness_us`: calibrated in the reference process, it may cost
    more in the candidate's). A process that waits on the GPU within a call is timed with its
    host in the loop, which its own events do not see: no accusation then. The figure is the
    judge's either way: this only names a timer that does not see all of the work."""
    if host_bound or not judge_samples or reported_us <= 0:
        return ""
    fastest = min(judge_samples)
    if fastest <= reported_us * (1 + BAND) + SLACK_US + HARNESS_SHARE * harness_us:
        return ""
    return (f"integrity: the candidate's process reported {reported_us:.1f} us per call, but the judge's own "
            f"clock measured at least {fastest:.1f} us per call of the same work (more than {BAND:.0%} + "
            f"{SLACK_US:g} us + half the batch's own {harness_us:.1f} us per call apart): a timer that does not "
            "see all of the work")
