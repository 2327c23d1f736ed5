"""The device's measured ceilings for the speed of light, cached per device and node.

GPU: roofline.measure_limits (copy bandwidth; fp32, TF32 and bf16 matmul rates). CPU: the
same with perf_counter over the threads torch uses, plus the copy rate by working-set size:
the timing loop makes fresh inputs right before each call, so a problem whose bytes fit in
a cache streams them from there, and DRAM's rate would be no ceiling for it. The cache is
kcoder's cache dir on the node that measures (`profile/devices.json`), keyed by the device's
name (a CPU's also by its thread count).
"""

from __future__ import annotations

import time
from typing import Any

from kcoder.profile.roofline import DeviceLimits, load_limits, measure_limits, save_limits

# Working sets (read+write bytes) of the cpu copy curve: 256 KiB to 1 GiB, x4 apart.
CPU_CURVE_BYTES = [1 << s for s in range(18, 31, 2)]
CPU_MATMUL_N = 1024


def device_key(torch: Any, device: str) -> str:
    """The cache key of this process's device: the GPU's name, or the CPU model with the
    number of threads torch computes with."""
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    from kcoder.hostinfo import cpu_model

    return f"{cpu_model()} ({torch.get_num_threads()} threads)"


def limits_for(torch: Any, device: str) -> tuple[DeviceLimits, bool]:
    """The device's ceilings and whether they were measured just now (else cached)."""
    key = device_key(torch, device)
    cached = load_limits(key)
    # an entry the profiler cached before the relaxed rates were measured is measured again
    if cached is not None and (device == "cpu" or cached.tf32_flops_per_s is not None):
        return cached, False
    limits = measure_limits(torch) if device == "cuda" else measure_cpu(torch)
    limits.device = key
    save_limits(limits)
    return limits, True


def _best_s(fn: Any, repeats: int, trials: int = 5) -> float:
    """Best mean seconds per call over `trials` loops of `repeats` calls, after one warm-up."""
    fn()
    best = float("inf")
    for _ in range(trials):
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - started) / repeats)
    return best


def _copy_rate(torch: Any, nbytes: int) -> float:
    """Read+write bytes per second of a torch copy whose source and destination are
    `nbytes` together (about as many calls as fit in ~30 ms). Into a destination allocated
    once: a fresh output's page faults (a CPU allocator's, not the memory's) are not part of
    the ceiling, so on a CPU a problem with large outputs reads well below 100%."""
    src = torch.ones(nbytes // 8, dtype=torch.float32)
    dst = torch.empty_like(src)
    repeats = max(1, min(200, (32 << 20) // nbytes))
    return nbytes / _best_s(lambda: dst.copy_(src), repeats)


def measure_cpu(torch: Any) -> DeviceLimits:
    """Copy rates by working set and the fp32 and bf16 matmul rates of this CPU with the
    threads torch uses."""
    curve = {str(size): _copy_rate(torch, size) for size in CPU_CURVE_BYTES}
    n = CPU_MATMUL_N
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    fp32_s = _best_s(lambda: torch.mm(a, b, out=c), repeats=2, trials=3)
    a, b, c = a.bfloat16(), b.bfloat16(), c.bfloat16()
    bf16_s = _best_s(lambda: torch.mm(a, b, out=c), repeats=1, trials=2)
    flop = 2 * n**3
    return DeviceLimits(device="cpu", copy_bytes_per_s=curve[str(CPU_CURVE_BYTES[-1])],
                        fp32_flops_per_s=flop / fp32_s, bf16_flops_per_s=flop / bf16_s,
                        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), torch_version=torch.__version__,
                        method=f"torch on {torch.get_num_threads()} threads: copies of 256 KiB to 1 GiB "
                               f"(read+write bytes); fp32 and bf16 matmul {n}^3",
                        copy_curve=curve)
