"""The judge's own clock against the per-call time the candidate's process reported.

The judge times n calls back to back (worker.op_batch) between two messages. What its clock
sees is more than the candidate's kernels: the harness's per-call work (one input element
changed, the module call), the messages' round trip, and on the GPU the host's work of every
call (Python, a library's per-call setup, launches), which the candidate's CUDA-event time
leaves out by design (the clock's head start hides it, for the baselines alike). A kernel of
16 us behind 500 us of cuDNN host work is honest; a rule "3x the claim + 100 us" called it a
cheat. So the judge compares like with like:

1. A calibration batch through the same path with a module that computes nothing in the
   candidate's place (batch.calibration_module) measures what the batch costs besides the
   candidate; it is taken off. The candidate's code never runs in it.
2. On the GPU, when the host's part explains the batch's time (the worker says when all n
   calls are queued, the judge's clock notes it), a gated batch: the GPU first sleeps until
   every call is queued, then runs them back to back, so the judge's clock sees their device
   time; a gated calibration batch before and after (same sleep) is taken off, and the two's
   difference and a share of the sleep are allowed for its jitter.

Only a gap these cannot explain, more than FACTOR x the claim + SLACK_US, is an accusation:
a candidate that under-reports (a patched timer, work outside the timed stream) shows its
real time there, more than twice its claim when it under-reports by 3x or more. Where the
host cannot queue calls ahead of the GPU (the candidate waits for it inside a call), no
figure compares like with like: the note says "inconclusive" and nobody is accused (the
profiler's cross-check in judge.py still compares the device's kernel time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

FACTOR = 2.0
SLACK_US = 20.0
BATCH_TARGET_S = 0.2
TRIES = 5  # a busy host slows some batches; a false claim fails every one
HOST_BOUND = 0.5  # queued after this share of the batch's time: the host's work may explain it
GATED_CALLS = 64  # few enough that their launches fit the device's queue while the GPU sleeps
MIN_GATED_CALLS = 4
GATE_MARGIN = 1.5  # the sleep lasts this many times the host's time to queue the calls
GATE_EXTRA_S = 2e-3
MAX_GATE_S = 0.5
GATE_JITTER = 0.02  # share of the sleep allowed for its variation beyond the two calibrations'
CLEAN = 0.8  # the calls were queued before this share of the gated calibration's time


@dataclass
class BatchTime:
    """The judge's clock over one batch: until the host had queued every call, and until done."""

    n: int
    queued_s: float
    done_s: float


@dataclass
class Finding:
    """The candidate's own time per call by the judge's clock, and how it was measured."""

    per_call_us: float
    allowance_us: float
    how: str


def like_for_like(run: BatchTime, calibration: BatchTime) -> float:
    """Per-call time of the candidate's own work: the batch less its calibration, in us."""
    return max(0.0, (run.done_s - calibration.done_s) / run.n * 1e6)


def accuses(claimed_us: float, finding: Finding) -> bool:
    """A gap that neither the claim (with margin) nor the measurement's jitter explains."""
    return finding.per_call_us > FACTOR * claimed_us + SLACK_US + finding.allowance_us


class OuterClock:
    """Runs the cross-check for one evaluation (judge.py holds the channel and the verdict)."""

    def __init__(self, judge: Any, claimed_us: float, deadline: float) -> None:
        self.judge, self.claimed, self.deadline = judge, claimed_us, deadline
        self.cuda = judge.options.device == "cuda"

    def check(self) -> None:
        claimed = self.claimed
        n = max(10, min(200, int(BATCH_TARGET_S * 1e6 / max(claimed, 1.0))))
        best: tuple[Finding, BatchTime, BatchTime] | None = None
        for _ in range(TRIES):
            cal = self.batch(n, calibration=True)
            run = self.batch(n)
            finding = Finding(like_for_like(run, cal), 0.0, f"{n} back-to-back calls")
            if best is None or finding.per_call_us < best[0].per_call_us:
                best = (finding, run, cal)
            if not accuses(claimed, finding) or self.host_bound(run):
                break  # agreed; or the host's work may explain it, which only the gate can tell
        assert best is not None
        finding, run, cal = best
        harness_us = cal.done_s / n * 1e6
        if accuses(claimed, finding) and self.host_bound(run):
            # The host's part may explain the time: measure the device's alone.
            gated = self.gated(n, run.queued_s / n)
            if gated is None:
                # The host never queued the calls ahead of the GPU (the candidate synchronizes,
                # or its launches fill the device's queue): no figure compares like with like,
                # and a judge that accuses honest code is worse than one that misses a cheat
                # (the profiler's cross-check still compares the device's time).
                self.note(finding, harness_us, "inconclusive: the host's work could not be separated from the "
                                               "device's (the candidate waits for the GPU within a call?)")
                return
            finding = gated
        self.note(finding, harness_us)
        if accuses(claimed, finding):
            self.accuse(finding)

    def host_bound(self, run: BatchTime) -> bool:
        """On the GPU: the host was still queuing calls late in the batch, so its work (not the
        device's) may be what the judge's clock saw."""
        return self.cuda and run.queued_s >= HOST_BOUND * run.done_s

    def gated(self, n: int, host_s: float) -> Finding | None:
        """The device time per call from gated batches; None when the host never managed to
        queue the calls before the gate opened."""
        calls = max(MIN_GATED_CALLS, min(GATED_CALLS, n, int(MAX_GATE_S / GATE_MARGIN / max(host_s, 1e-6))))
        while calls >= MIN_GATED_CALLS:
            gate_s = min(MAX_GATE_S, GATE_MARGIN * calls * host_s + GATE_EXTRA_S)
            before = self.batch(calls, gate_s, calibration=True)
            run = self.batch(calls, gate_s)
            after = self.batch(calls, gate_s, calibration=True)
            if run.queued_s < CLEAN * min(before.done_s, after.done_s):
                slower = before if before.done_s >= after.done_s else after  # the larger share taken off
                jitter_s = abs(before.done_s - after.done_s) + GATE_JITTER * gate_s
                return Finding(like_for_like(run, slower), jitter_s / calls * 1e6,
                               f"{calls} calls queued behind a {gate_s * 1e3:.1f} ms GPU gate: device time")
            calls //= 2
        return None

    def batch(self, n: int, gate_s: float = 0.0, calibration: bool = False) -> BatchTime:
        """One batch timed by the judge's clock; the last output of a candidate's batch is checked."""
        judge = self.judge
        seed = judge.seed()
        judge.ask_candidate(self.left(), "timing", op="batch", seed=seed, n=n, gate_s=gate_s,
                            calibration=calibration, expect="ready")
        started = time.monotonic()
        judge.cand.send(op="go")
        judge._expect(judge._receive(judge.cand, self.left(), "timing"), "queued", "timing")
        queued = time.monotonic() - started
        judge._expect(judge._receive(judge.cand, self.left(), "timing"), "done", "timing")
        done = time.monotonic() - started
        if not calibration:
            judge.last_seed = seed
            judge.checked_call("timing", f"the last of {n} back-to-back calls", self.deadline, save_last=True,
                               perturbed=n)
        return BatchTime(n, queued, done)

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def note(self, finding: Finding, harness_us: float, extra: str = "") -> None:
        allowance = f" ± {finding.allowance_us:.1f}" if finding.allowance_us else ""
        self.judge.verdict.notes.append(
            f"judge's clock: {finding.per_call_us:.1f}{allowance} us per call of the candidate's own work over "
            f"{finding.how}, after the batch's own {harness_us:.1f} us per call (a calibration batch) "
            f"(reported {self.claimed:.1f} us)" + (f"; {extra}" if extra else ""))

    def accuse(self, finding: Finding) -> None:
        self.judge.fail("timing", f"integrity: the candidate's process reported {self.claimed:.1f} us per call, "
                                  f"but the judge's own clock measured {finding.per_call_us:.1f} us per call of its "
                                  f"work ({finding.how}; more than {FACTOR:g}x the reported time + {SLACK_US:.0f} us"
                                  f"{' + its jitter' if finding.allowance_us else ''}): timer tampering, or work "
                                  "outside the timed stream?")
