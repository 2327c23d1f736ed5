"""Timing eager, torch.compile and the candidate side by side, honestly.

`measure()` interleaves the implementations in a random order each round, on fresh inputs
every round (each input set is seen once, so a cache cannot help), flushes the L2 between
calls on the GPU and times with CUDA events (perf_counter on the CPU). The candidate's
output of every timed call is checked against eager's output for the same inputs, and some
rounds add an untimed guarded audit call on the same inputs, so the guard never sits in the
timed region yet a candidate cannot tell timed calls from guarded ones.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HOST_OVERLAP_S = 50e-6  # the GPU's head start before each timed call, grown to cover the host
MAX_HOST_OVERLAP_S = 5e-3


@dataclass
class Timings:
    """Per-implementation times in microseconds, one per round (same order across impls)."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def iqr(self, name: str) -> float:
        values = sorted(self.samples[name])
        if len(values) < 4:
            return values[-1] - values[0]
        q = statistics.quantiles(values, n=4)
        return q[2] - q[0]

    def speedup(self, base: str, cand: str) -> float:
        return self.median(base) / self.median(cand)

    def speedup_ci(self, base: str, cand: str, level: float = 0.90, n_boot: int = 400) -> list[float]:
        """Bootstrap interval of the ratio of medians, resampling rounds (paired)."""
        rng = random.Random(1234)
        a, b = self.samples[base], self.samples[cand]
        n = len(a)
        ratios = []
        for _ in range(n_boot):
            idx = [rng.randrange(n) for _ in range(n)]
            ratios.append(statistics.median(a[i] for i in idx) / statistics.median(b[i] for i in idx))
        ratios.sort()
        lo = ratios[int((1 - level) / 2 * n_boot)]
        hi = ratios[int((1 + level) / 2 * n_boot) - 1]
        return [round(lo, 4), round(hi, 4)]


def l2_flush_buffer(torch: Any) -> Any:
    """A zeroed buffer twice the size of the GPU's L2."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    return torch.zeros(max(2 * l2, 8 << 20) // 4, dtype=torch.float32, device="cuda")


def flush_l2(buffer: Any) -> None:
    """Evict the L2 by reading twice its size. Reading, not writing: zeroing the buffer would
    leave the L2 full of dirty lines, and the next timed kernel would pay for writing them back
    (ncu, which invalidates the cache before each replay, measures without that cost)."""
    buffer.sum()


class Clock:
    """Times one call. CUDA: events on the current stream around the call, after an L2 flush."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = device
        self.cuda = device == "cuda"
        self.pending: list[tuple[Any, Any]] = []
        if self.cuda:
            self.flush_buffer = l2_flush_buffer(torch)
            self.event = torch.cuda.Event
            # Keep the GPU busy for ~50 us before each timed call, so the host's launch
            # overhead (Python, guards of torch.compile, pybind) overlaps it and every
            # implementation is timed on device time alike.
            khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 1_980_000
            self.cycles_per_s = khz * 1e3
            self.overlap_s = HOST_OVERLAP_S
            self.gpu_sleep = torch.cuda._sleep

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def call(self, fn: Callable[..., Any], inputs: list[Any]) -> tuple[Any, Callable[[], float]]:
        """Run fn(*inputs) timed; return its output and a function giving the time in us."""
        if self.cuda:
            flush_l2(self.flush_buffer)
            self.gpu_sleep(int(self.cycles_per_s * self.overlap_s))
            start, end = self.event(enable_timing=True), self.event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            out = fn(*inputs)
            host_s = time.perf_counter() - t0
            end.record()
            # A call whose host side outlasts the head start (torch.compile's guards on a busy
            # CPU) would leave the GPU idle inside the timed range, and the figure would vary
            # with the host from run to run: grow the head start for the calls that follow.
            if host_s > 0.5 * self.overlap_s:
                self.overlap_s = min(MAX_HOST_OVERLAP_S, 2 * host_s)
            return out, lambda: start.elapsed_time(end) * 1000.0
        t0 = time.perf_counter()
        out = fn(*inputs)
        elapsed = (time.perf_counter() - t0) * 1e6
        return out, lambda: elapsed


def measure(impls: dict[str, Callable[..., Any]], *, candidate: str, new_inputs: Callable[[int], list[Any]],
            check: Callable[[int, Any, Any], None], audit: Callable[[int, list[Any]], None],
            clock: Clock, warmup: int, min_rounds: int, max_rounds: int, budget_s: float,
            audit_every: int, fresh_copy: Callable[[list[Any]], list[Any]] | None = None,
            seed: int = 0) -> Timings:
    """Interleaved timing. `check(round, candidate_out, eager_out)` raises on a wrong output;
    `audit(round, inputs)` runs an untimed guarded call. Warm-up uses its own input sets."""
    import torch

    rng = random.Random(seed)
    names = list(impls)
    with torch.no_grad():
        for w in range(warmup):
            inputs = new_inputs(-1 - w)
            for name in names:
                args = fresh_copy(inputs) if fresh_copy else inputs
                if w == 0:  # first calls (compilation, autotuning, caches) would teach the clock nothing
                    impls[name](*args)
                else:  # as timed, so the clock's head start fits each call's host time before round 0
                    clock.call(impls[name], args)
            clock.sync()
        timings = Timings({name: [] for name in names})
        spent = 0.0
        for r in range(max_rounds):
            inputs = new_inputs(r)
            order = names[:]
            rng.shuffle(order)
            outputs, readers = {}, {}
            for name in order:
                args = fresh_copy(inputs) if fresh_copy else inputs
                outputs[name], readers[name] = clock.call(impls[name], args)
            clock.sync()
            for name in order:
                value = readers[name]()
                timings.samples[name].append(value)
                spent += value / 1e6
            check(r, outputs[candidate], outputs["eager"])
            del outputs  # all outputs of a round stay alive until here: no stale-memory reuse
            if audit_every and r % audit_every == audit_every - 1:
                audit(r, inputs)
            if r + 1 >= min_rounds and spent >= budget_s:
                break
    return timings


def device_kernel_time_us(fn: Callable[..., Any], inputs: list[Any], calls: int = 3) -> float:
    """Sum of GPU kernel time per call over all streams, from a profiler trace.

    Compared with the event time on the current stream, this exposes work launched on other
    streams (which the events would not wait for)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    total = 0.0
    for evt in prof.events():
        if getattr(evt, "device_type", None) == torch.autograd.DeviceType.CUDA:
            total += evt.device_time if hasattr(evt, "device_time") else evt.cuda_time
    return total / calls
