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

A calibration batch (a module that computes nothing, outputs shaped as the implementation's)
measures what a batch costs besides the implementation: the inputs' factors, the L2 flush,
the commitments, the messages. Each sample is a batch less the mean of the calibrations on
either side of it, per call.
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

from kcoder.evaluate.channel import ChannelError, Peer

QUEUE_WAIT_S = 2.0  # a process that has not queued its batch by then waits on the GPU itself
HOST_BOUND_WAIT_S = 0.05  # and once one of its batches did, the next ones are not waited for as long
MAX_CALLS = {"cuda": 64, "cpu": 512}  # cuda: the launches of a batch must fit the device's queue
TARGET_S = {"cuda": 0.01, "cpu": 0.05}  # the implementation's own time per batch
KEEP_BYTES = 2**30  # a batch's outputs are kept for the judge's drawn checks (in both processes)
SAMPLES = 5  # the candidate's; each with one drawn call checked (5 more checks than input sets)
BAND = 0.10  # the judge's clock may exceed an in-process figure by this share ...
SLACK_US = 3.0  # ... plus this, before the in-process figure is called false


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
class Figure:
    """An implementation's per-call samples by the judge's clock, and how they were taken."""

    samples: list[float] = field(default_factory=list)
    n: int = 0
    host_bound: bool = False
    batches: list[Batch] = field(default_factory=list)


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

    def figure(self, first_us: float, keep_bytes: int, samples: int = SAMPLES, budget_s: float = 1.0,
               on_batch: Callable[[Batch], None] | None = None) -> Figure:
        """`samples` per-call samples; `first_us` sizes the batches (any hint: a wrong one costs
        precision, never the verdict's soundness); `keep_bytes` an output's bytes (the batch
        keeps every output until the judge has drawn its checks); `budget_s` the implementation's
        own seconds over every batch, at most (a batch lasts at most TARGET_S). `on_batch` sees every timed
        (non-calibration) batch: the judge checks drawn calls there."""
        device = "cuda" if self.cuda else "cpu"
        target_s = min(TARGET_S[device], budget_s / (2 * samples + 1))
        n = int(target_s * 1e6 / max(first_us, 0.1))
        n = max(1, min(n, MAX_CALLS[device], max(1, KEEP_BYTES // max(keep_bytes, 1))))
        figure = Figure(n=n)
        before = self.batch(n, calibration=True)
        for _ in range(samples):
            run = self.batch(n, calibration=False)
            if on_batch is not None:  # before the next batch: the process keeps one batch's outputs
                on_batch(run)
            after = self.batch(n, calibration=True)
            figure.batches.append(run)
            figure.host_bound |= run.host_bound
            own = run.seconds - (before.seconds + after.seconds) / 2
            figure.samples.append(max(own, 0.0) / n * 1e6)
            before = after
        return figure


def _commitments(value: Any, n: int) -> list[list[int]]:
    """Every call's checksums as the process sent them (checked later against outputs the
    reference process reads itself: a malformed list is simply one that will not match)."""
    if not isinstance(value, list) or len(value) != n:
        return [[] for _ in range(n)]
    return [[int(v) for v in row if isinstance(v, int)] if isinstance(row, list) else [] for row in value]


def disagreement(judge_samples: list[float], reported_us: float, host_bound: bool) -> str:
    """A reason to refuse when the judge's clock measured more than the candidate's process
    reported for the same work beyond the noise band (its fastest sample against the band, so a
    busy host never accuses); "" otherwise. A process that waits on the GPU within a call is
    timed with its host in the loop, which its own events do not see: no accusation then."""
    if host_bound or not judge_samples or reported_us <= 0:
        return ""
    fastest = min(judge_samples)
    if fastest <= reported_us * (1 + BAND) + SLACK_US:
        return ""
    return (f"integrity: the candidate's process reported {reported_us:.1f} us per call, but the judge's own "
            f"clock measured at least {fastest:.1f} us per call of the same work (more than {BAND:.0%} + "
            f"{SLACK_US:g} us apart): a timer that does not see all of the work")
