"""The judge's clock on the cpu target: batches in arenas (harness/arena.py, issue 45).

What runs in the candidate's process is only the candidate. The reference process keeps two
memfds, mapped once by every process that runs batches: every call's inputs of a batch, and an
output slot per call, every float element poisoned (reference/arenaprep.py). A candidate's batch:
every process of the candidate's is frozen (SIGSTOP) while the reference process writes the
batch's inputs; the judge's clock starts; the candidate is continued and told to run the batch;
its "done" stops the clock and it is frozen again at once. Only then does the reference process
read the slots: every float element must have been written, and drawn calls (at least two per
batch) must match the reference for the inputs those calls saw. The candidate can read a batch's
inputs only while the clock runs, and no figure, checksum or calibration of its process is read.

Eager, torch.compile and the calibration (a module that computes nothing) run the same batch in
the reference process, by the same code. What is taken off a candidate's batch is at most what
the calibration cost in this evaluation, timed in the reference process while every process of
the candidate's was frozen.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcoder.evaluate.freeze import freeze, thaw
from kcoder.evaluate.harness.channel import ChannelError
from kcoder.evaluate.judgeclock import Batch, BatchClock, Endpoint

CHECKED_CALLS = 2  # drawn calls of every candidate batch compared with the reference


@dataclass
class CandidateSide:
    """The candidate's process as an arena batch needs it."""

    endpoint: Endpoint  # its peer and the judge's handling of its failures
    share: Any  # its descriptor socket
    freeze: Callable[[], set[int]]  # every process of the candidate's stopped (freeze.py)
    thaw: Callable[[set[int]], None]
    judge_check: Callable[[dict[str, Any], str], None]  # the judge's reading of a check's result (fails or records)


class ArenaClock(BatchClock):
    """Times batches on the cpu target: the reference process's own (`impl`), or the candidate's."""

    def __init__(self, reference: Endpoint, share: Any, deadline: float, impl: str = "",
                 candidate: CandidateSide | None = None) -> None:
        super().__init__(reference, False, deadline, impl)
        self.share, self.cand = share, candidate
        self.probing = False  # the batch that sizes the others (hint_us) runs

    def batch(self, n: int, calibration: bool) -> Batch:
        if self.cand is None:
            return self._reference_batch(n, self.impl, calibration)
        stopped = self.cand.freeze()
        try:
            if calibration:  # the harness's own cost, timed in the reference process alone
                return self._reference_batch(n, "eager", True)
            return self._candidate_batch(n, stopped)
        finally:
            self.cand.thaw(stopped)

    def _arena(self, n: int, seed: int, key: int, impl: str, calibration: bool,
               process: int = 0) -> tuple[dict[str, Any], list[int]]:
        """The batch's inputs written by the reference process (before any clock); a new arena's
        descriptors."""
        from kcoder.evaluate.harness.handoff import HandoffError, receive_fd

        ref = self.ep
        try:
            reply = ref.peer.request(self.left(), op="arena", seed=seed, n=n, key=key, impl=impl,
                                     calibration=calibration, process=process)
        except ChannelError as exc:
            ref.fail(exc)
            raise
        layout = ref.expect(reply, "arena")["arena"]
        fds: list[int] = []
        try:
            for _ in range(2 if layout.get("fresh") else 0):
                fds.append(receive_fd(self.share))
        except HandoffError as exc:
            _close(fds)
            ref.fail(ChannelError("exited", f"the arena's descriptors did not come ({exc})"))
        return layout, fds

    def _reference_batch(self, n: int, impl: str, calibration: bool) -> Batch:
        seed, key = secrets.randbelow(2**31 - 1) + 1, secrets.randbits(32)
        self._arena(n, seed, key, impl, calibration)
        ref = self.ep
        try:
            started = time.monotonic()
            ref.peer.send(op="go")
            done = ref.peer.receive(self.left(), watch=False)
            seconds = time.monotonic() - started
        except ChannelError as exc:
            ref.fail(exc)
            raise
        ref.expect(done, "done")
        return Batch(n, seconds, seed, key, [], False)

    def _candidate_batch(self, n: int, stopped: set[int]) -> Batch:
        """One batch of the candidate's, `stopped` its processes (frozen by the caller, and
        continued by it after the checks)."""
        from kcoder.evaluate.harness.handoff import send_fd

        cand = self.cand
        assert cand is not None
        seed, key = secrets.randbelow(2**31 - 1) + 1, secrets.randbits(32)
        layout, fds = self._arena(n, seed, key, "candidate", False, cand.endpoint.peer.proc.pid)
        # The reference process stopped while the candidate's batch runs: after writing the inputs its
        # idle OpenMP threads spin for milliseconds, and on a host with few cores they took the
        # candidate's cores (a 1-row softmax read 8.7 ms a call instead of 11 us). The candidate's
        # processes are stopped in turn while the reference process runs (`batch`).
        reference = freeze(self.ep.peer.proc.pid)
        try:
            started = time.monotonic()  # before it can run at all: whatever it does from here is timed
            cand.thaw(stopped)
            for fd in fds:
                send_fd(cand.share, fd)
            cand.endpoint.peer.send(op="arena", layout=layout)
            done = cand.endpoint.peer.receive(self.left(), watch=False)
            seconds = time.monotonic() - started
        except ChannelError as exc:
            cand.endpoint.fail(exc)
            raise
        except OSError as exc:
            cand.endpoint.fail(ChannelError("exited", f"handing the arena over failed ({exc})"))
            raise
        finally:
            _close(fds)
            thaw(reference)
        stopped |= cand.freeze()  # nothing of the candidate's runs while its outputs are read
        cand.endpoint.expect(done, "done")
        self._check(n)
        return Batch(n, seconds, seed, key, [], False)

    def hint_us(self, calibration: Any) -> float:
        self.probing = True  # its figure only sizes the batches: its slots are scanned, no call compared
        try:
            return super().hint_us(calibration)
        finally:
            self.probing = False

    def _check(self, n: int) -> None:
        """Every slot scanned for unwritten elements, then CHECKED_CALLS drawn calls compared."""
        import random

        drawn = 0 if self.probing else min(n, CHECKED_CALLS)
        calls = random.Random(secrets.randbits(64)).sample(range(n), drawn) or [-1]
        ref = self.ep
        for k, call in enumerate(calls):
            label = f"call {call + 1} of a batch of {n} timed by the judge's clock"
            try:
                reply = ref.peer.request(self.left(), op="arena_check", call=call, label=label, scan=k == 0)
            except ChannelError as exc:
                ref.fail(exc)
                raise
            assert self.cand is not None
            self.cand.judge_check(ref.expect(reply, "ok"), label)


def _close(fds: list[int]) -> None:
    import os

    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
