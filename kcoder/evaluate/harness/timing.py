"""The clock and the round policy, used alike for the baselines and the candidate.

`Clock.call` times one call: on the GPU after an L2 flush, with persisting-L2 state reset,
a short GPU head start that hides the host's launch work, and CUDA events (perf_counter on
the CPU). `time_rounds` times several implementations in a random order per round, each on
inputs made fresh from the round's seed. The baselines run in the reference process and the
candidate in its own (see judge.py); the judge turns the samples into figures (timings.py).
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

# One heap policy for both processes that time (the reference's baselines, the candidate's), set
# in their environment (spawn.py). glibc's default adapts its thresholds to what a process freed
# before, so two processes running the same code could differ for good: in some, every MB-sized
# tensor that CPU eager allocates and frees was handed back to the kernel and page-faulted in again
# on each call (2016 minor faults per round of tests/problems/scale_add.py, against 0 in the others;
# 1 process in 5 with one thread, 3 in 5 with two), which timed eager 3-15x slower. The same lottery
# held for blocks of 32 MiB and more: mapped and faulted in on every call, unless the heap's top
# happened to hold that much free (examples/elementwise_chain's 32 MiB output: its solution read
# 5.8 or 20 ms a call by the process, eager 18 or 80 ms). So nothing is mapped on its own
# (MALLOC_MMAP_MAX_=0): every block comes from a heap never trimmed below 1 GiB of free top, and
# what a process used at its peak stays its own, in every process alike.
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**30),
                 "MALLOC_MMAP_MAX_": "0"}
HOST_OVERLAP_S = 50e-6  # the GPU's head start before each timed call, grown to cover the host
MAX_HOST_OVERLAP_S = 5e-3


def l2_flush_buffer(torch: Any) -> Any:
    """A zeroed buffer twice the size of the GPU's L2."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    return torch.zeros(max(2 * l2, 8 << 20) // 4, dtype=torch.float32, device="cuda")


def flush_l2(buffer: Any) -> None:
    """Evict the L2 by reading twice its size. Reading, not writing: zeroing the buffer would
    leave the L2 full of dirty lines, and the next timed kernel would pay for writing them back
    (ncu, which invalidates the cache before each replay, measures without that cost)."""
    buffer.sum()


CU_LIMIT_PERSISTING_L2 = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE (= cudaLimitPersistingL2CacheSize)


def cuda_driver() -> Any:
    """The CUDA driver library (libcuda), which every CUDA process has loaded, via ctypes; its
    context calls act on the context torch made current. None where it cannot be loaded."""
    import ctypes

    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


class Clock:
    """Times one call. CUDA: events on the current stream around the call, after an L2 flush."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = device
        self.cuda = device == "cuda"
        self.driver: Any = None
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
            self.driver = cuda_driver()

    def reset_persisting_l2(self) -> int:
        """Drop persisting-L2 lines and their carve-out (an access-policy window set by a
        candidate would otherwise keep its data resident across the flush). Returns the
        carve-out in bytes that was set before the reset (0 when none was)."""
        if not self.cuda or self.driver is None:
            return 0
        import ctypes

        found = ctypes.c_size_t(0)
        self.driver.cuCtxGetLimit(ctypes.byref(found), CU_LIMIT_PERSISTING_L2)
        self.driver.cuCtxResetPersistingL2Cache()
        if found.value:
            self.driver.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        return int(found.value)

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


def time_rounds(impls: dict[str, Callable[..., Any]], make_inputs: Callable[[int], list[Any]], clock: Clock, *,
                seeds: list[int], warmup: list[int], min_rounds: int, budget_s: float,
                seed: int = 0, spent: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Time each implementation once per round, in a random order, each call on inputs made
    fresh from the round's seed (so a call that modifies its inputs harms no other), until
    `min_rounds` are done and `budget_s` of measured time is spent (or the seeds run out).
    Warm-up rounds use their own seeds. Returns per-implementation times in microseconds;
    `spent` (when given) gets each implementation's wall seconds, warm-up included."""
    import torch

    rng = random.Random(seed)
    names = list(impls)
    walls = spent if spent is not None else {}
    walls.update({name: 0.0 for name in names})
    with torch.no_grad():
        for w, s in enumerate(warmup):
            for name in names:
                started = time.perf_counter()
                inputs = make_inputs(s)
                if w == 0:  # first calls (compilation, autotuning, caches) would teach the clock nothing
                    impls[name](*inputs)
                else:  # as timed, so the clock's head start fits each call's host time before round 0
                    clock.call(impls[name], inputs)
                clock.sync()
                del inputs
                walls[name] += time.perf_counter() - started
        samples: dict[str, list[float]] = {name: [] for name in names}
        measured = 0.0
        for r, s in enumerate(seeds):
            order = names[:]
            rng.shuffle(order)
            # On a GPU every call's inputs are made from the seed right before it (cheap there),
            # so one input set is alive at a time; on a CPU, where making them costs more than
            # a copy, the round's set is made once and copied for all but its last call.
            fresh = None if clock.cuda else make_inputs(s)
            for i, name in enumerate(order):
                started = time.perf_counter()
                inputs = _round_inputs(fresh, make_inputs, s, last=i == len(order) - 1)
                clock.reset_persisting_l2()
                out, read = clock.call(impls[name], inputs)
                clock.sync()
                samples[name].append(read())
                measured += samples[name][-1] / 1e6
                del out, inputs
                walls[name] += time.perf_counter() - started
            del fresh
            if r + 1 >= min_rounds and measured >= budget_s:
                break
    return samples


def _round_inputs(fresh: list[Any] | None, make_inputs: Callable[[int], list[Any]], seed: int,
                  last: bool) -> list[Any]:
    """One call's inputs: made from the seed (`fresh` None), else the round's own set for its
    last call and a copy before that, so a call that modifies its inputs cannot affect the next."""
    if fresh is None:
        return make_inputs(seed)
    return fresh if last else [x.clone() if hasattr(x, "clone") else x for x in fresh]
