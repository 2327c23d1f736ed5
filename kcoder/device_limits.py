"""The device's ceilings (copy bandwidth, fp32 rate): measured once per device, kept in the
cache, read by the speed of light (evaluate/sol.py) and the roofline (profile/). Below both
packages: the evaluator needs them and the profiler places kernels against them.

Roofline against the real machine: measured copy bandwidth and FP32 FMA rate, per device.

The ceilings are measured, not taken from a spec sheet: a large device-to-device copy
(bytes read + bytes written per second) and an fp32 matmul with TF32 off (2*n^3 FLOP per
call, the CUDA-core FMA path). They are measured once per device name and cached as JSON in
kcoder's cache dir (`profile/devices.json`). Because they are achievable rates rather than
theoretical peaks, a very good kernel can read slightly above 100%. FLOPs are FP32 CUDA-core
operations from ncu's SASS counters (an FFMA counts two); tensor-core, fp16 and fp64 work is
not counted, so a tensor-core kernel reads as memory- or latency-bound here.

The device's measured ceilings for the speed of light, cached per device and node.

GPU: measure_limits (copy bandwidth; fp32, TF32 and bf16 matmul rates). CPU: the
same with perf_counter over the threads torch uses, plus the copy rate by working-set size:
the timing loop makes fresh inputs right before each call, so a problem whose bytes fit in
a cache streams them from there, and DRAM's rate would be no ceiling for it. The cache is
kcoder's cache dir on the node that measures (`profile/devices.json`), keyed by the device's
name (a CPU's also by its thread count). Entries are signed (kcoder/trust.py) and measured only
in processes that never loaded a candidate's code (the reference process; the profiler's
calibration step, profile/calibrate.py); the sandbox never mounts profile/.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kcoder.paths import cache_root
from kcoder.trust import read_plain, replace_file, signed, verified

LATENCY_BOUND_PCT = 20.0  # below this share of both ceilings, neither limits the kernel


@dataclass
class DeviceLimits:
    """Measured ceilings of one device."""

    device: str
    copy_bytes_per_s: float
    fp32_flops_per_s: float
    measured_at: str = ""
    torch_version: str = ""
    method: str = "torch: 1 GiB device-to-device copy (read+write bytes); fp32 matmul 8192^3, TF32 off"
    # Where the precision policy allows them (relaxed): matmul rates with TF32 on, in bf16.
    tf32_flops_per_s: float | None = None
    bf16_flops_per_s: float | None = None
    # cpu: copy rate by working-set size in bytes (read+write), since a freshly made input
    # that fits in the caches streams faster than DRAM; None on a GPU (L2 flushed per call).
    copy_curve: dict[str, float] | None = None
    # copy rates at problems' own sizes (evaluate/sol.py own_size_rate), timed as calls are
    size_rates: dict[str, float] | None = None

    def bandwidth_for(self, nbytes: float) -> float:
        """Bytes/s a copy of `nbytes` (read+write) reaches: the rate measured at the largest
        working set not above it (rates rise as data fits in a cache), else DRAM's."""
        if not self.copy_curve:
            return self.copy_bytes_per_s
        sizes = sorted((int(k), v) for k, v in self.copy_curve.items())
        below = [rate for size, rate in sizes if size <= nbytes]
        return below[-1] if below else sizes[0][1]

    def fastest_copy_up_to(self, nbytes: float) -> float:
        """The fastest copy rate (read+write bytes/s) measured at any working set up to `nbytes`:
        the device's ceiling, the curve's sizes and the problems' own sizes not above it (all
        of them when `nbytes` is under every size measured). The physical floor's rate
        (evaluate/floor.py): a kernel whose data stays in a cache is never slower than the
        best copy of a working set that fits there, and one slow measurement changes nothing."""
        sized = [(int(k), v) for table in (self.copy_curve or {}, self.size_rates or {})
                 for k, v in table.items() if isinstance(v, (int, float)) and v > 0]
        fit = [v for size, v in sized if size <= nbytes]
        return max([self.copy_bytes_per_s, *(fit or [v for _, v in sized])])

    def copy_rate_at_size(self, nbytes: float) -> float:
        """The copy rate (read+write bytes/s) a copy of `nbytes` reaches here, read off the
        measured sizes so that it is never below the truth: the fastest measured at any size
        from the curve's largest one not above `nbytes` up (the curve's sizes and the problems'
        own sizes there; without a curve size below, from the own sizes' largest below; every
        size when none is below), and the device's ceiling. Between two measured sizes that
        is at least the faster of the two: past the caches' peak the rate falls as the working
        set grows, so the size below bounds it; under the peak a torch copy is slowed by its
        ~1 us per call, which a tuned kernel need not pay, so the peak bounds it; and one size
        measured slow (a busy host) is outvoted by any larger one. Smaller sizes' cache-resident
        rates do not count: data this large does not stay in a cache between the judge's calls
        (the physical floor on the cpu, evaluate/reference/floor.py)."""
        curve, own = ([(int(k), float(v)) for k, v in (table or {}).items() if isinstance(v, (int, float)) and v > 0]
                      for table in (self.copy_curve, self.size_rates))
        below = [size for size, _ in curve if size <= nbytes] or [size for size, _ in own if size <= nbytes]
        start = max(below, default=0)
        return max([self.copy_bytes_per_s, *(v for size, v in curve + own if size >= start)])

    def flops_per_s(self, precision: str) -> float:
        """The matmul rate a candidate may reach under the precision policy (relaxed: the
        fastest of fp32, TF32 and bf16 that was measured)."""
        if precision != "relaxed":
            return self.fp32_flops_per_s
        return max(r for r in (self.fp32_flops_per_s, self.tf32_flops_per_s, self.bf16_flops_per_s) if r)

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.fp32_flops_per_s / self.copy_bytes_per_s

    def describe(self) -> str:
        return (f"{self.device}: copy {self.copy_bytes_per_s / 1e12:.2f} TB/s, FP32 FMA "
                f"{self.fp32_flops_per_s / 1e12:.1f} TFLOP/s (measured; ridge {self.ridge_flop_per_byte:.1f} FLOP/B; "
                "FLOP = 2*FFMA + FADD + FMUL, tensor-core work not counted)")


@dataclass
class RooflinePoint:
    """Where one kernel sits: its traffic, work, and share of each measured ceiling."""

    bytes: float
    flops: float
    duration_ns: float
    intensity: float | None  # FLOP per DRAM byte
    memory_pct: float  # achieved DRAM bytes/s as % of the measured copy bandwidth
    compute_pct: float  # achieved FP32 FLOP/s as % of the measured FMA rate
    bound: str  # "memory" | "compute" | "latency"
    limit_pct: float  # % of the ceiling that applies (the roofline at this intensity)

    def describe(self) -> str:
        if self.bound == "latency":
            return (f"latency-bound: {self.memory_pct:.0f}% of copy bandwidth, {self.compute_pct:.0f}% of FMA rate "
                    "(neither ceiling is near; too little work in flight or too short)")
        ai = f"{self.intensity:.2f} FLOP/B" if self.intensity is not None else "no FLOPs"
        return f"{self.bound}-bound ({ai}): {self.limit_pct:.0f}% of the hardware limit"


def roofline(bytes_: float | None, flops: float | None, duration_ns: float | None,
             limits: DeviceLimits | None) -> RooflinePoint | None:
    """The roofline point of a kernel, or None without traffic/time/ceilings."""
    if limits is None or not duration_ns or duration_ns <= 0 or bytes_ is None:
        return None
    flops = flops or 0.0
    seconds = duration_ns * 1e-9
    memory_pct = 100.0 * bytes_ / seconds / limits.copy_bytes_per_s
    compute_pct = 100.0 * flops / seconds / limits.fp32_flops_per_s
    intensity = flops / bytes_ if bytes_ > 0 else None
    if intensity is None:
        bound = "compute" if flops > 0 else "memory"
    else:
        bound = "memory" if intensity < limits.ridge_flop_per_byte else "compute"
    limit_pct = memory_pct if bound == "memory" else compute_pct
    if max(memory_pct, compute_pct) < LATENCY_BOUND_PCT:
        bound = "latency"
    return RooflinePoint(bytes=bytes_, flops=flops, duration_ns=duration_ns, intensity=intensity,
                         memory_pct=memory_pct, compute_pct=compute_pct, bound=bound, limit_pct=limit_pct)


# --- the cache ---------------------------------------------------------------------------------
def _cache_file() -> Path:
    return cache_root() / "profile" / "devices.json"


def _entries() -> dict[str, Any]:
    try:
        data = json.loads(read_plain(_cache_file()))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_limits(device: str) -> DeviceLimits | None:
    """Cached ceilings for a device name, or None (also when the entry's MAC is not kcoder's:
    the judge's speed of light reads these, so a forged entry is measured again)."""
    entry = verified(_entries().get(device))
    if entry is None:
        return None
    try:
        return DeviceLimits(**entry)
    except TypeError:
        return None


def save_limits(limits: DeviceLimits) -> None:
    """Add one device's ceilings to the cache, signed (atomic replace; other devices kept).
    A process that cannot write there (a confined one) keeps them for itself only."""
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _entries()
        data[limits.device] = signed(json.loads(json.dumps(asdict(limits))))
        replace_file(path, json.dumps(data, indent=2).encode())
    except OSError:
        pass


# --- the measurement (runs in the profile target process, on the GPU) ---------------------------
def _best_ms(torch: Any, fn: Any, repeats: int, trials: int = 5) -> float:
    """Best mean time per call over `trials` event-timed loops of `repeats` calls (after warm-up)."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / repeats)
    return best


def _copy_ms(torch: Any, nbytes: int) -> float:
    """Time of one `nbytes` device-to-device copy (its buffers freed on return)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    dst = torch.empty_like(src)
    return _best_ms(torch, lambda: dst.copy_(src), repeats=10)


def measure_limits(torch: Any) -> DeviceLimits:
    """Measure the current CUDA device's copy bandwidth and fp32 FMA rate with torch."""
    free, _total = torch.cuda.mem_get_info()
    nbytes = int(min(1 << 30, free // 8)) // 16 * 16  # big enough to dwarf L2, small enough to fit
    copy_ms = _copy_ms(torch, nbytes)
    n = 8192 if free > 6 * 8192 * 8192 * 4 else 4096
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    old_precision = torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32: the CUDA-core FMA path
    torch.set_float32_matmul_precision("highest")
    try:
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        c = torch.empty(n, n, device="cuda")
        mm_ms = _best_ms(torch, lambda: torch.mm(a, b, out=c), repeats=3, trials=4)
        torch.backends.cuda.matmul.allow_tf32 = True  # what --precision relaxed allows
        tf32_ms = _best_ms(torch, lambda: torch.mm(a, b, out=c), repeats=3, trials=4)
        a, b, c = a.bfloat16(), b.bfloat16(), c.bfloat16()
        bf16_ms = _best_ms(torch, lambda: torch.mm(a, b, out=c), repeats=3, trials=4)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
        torch.set_float32_matmul_precision(old_precision)
    flop = 2 * n**3
    return DeviceLimits(device=torch.cuda.get_device_name(), copy_bytes_per_s=2 * nbytes / (copy_ms * 1e-3),
                        fp32_flops_per_s=flop / (mm_ms * 1e-3),
                        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), torch_version=torch.__version__,
                        method=f"torch: {nbytes >> 20} MiB device-to-device copy (read+write bytes); "
                               f"fp32 matmul {n}^3, TF32 off (and on; and bf16)",
                        tf32_flops_per_s=flop / (tf32_ms * 1e-3), bf16_flops_per_s=flop / (bf16_ms * 1e-3))

# Working sets (read+write bytes) of the cpu copy curve: 256 KiB to 1 GiB, x2 apart (the
# fastest rate, where a cache's share per thread fits, is the physical floor's; x4 steps
# could miss it by half). Not below: there torch's ~1 us per copy call dominates and a
# smaller copy reads slower, not faster (16 KiB: 16 GB/s where 1 MiB reached 115, 2 threads).
CPU_CURVE_BYTES = [1 << s for s in range(18, 31)]
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
    # an entry cached before the relaxed rates (gpu) or the whole curve (cpu) were measured is measured again
    if cached is not None and (cached.tf32_flops_per_s is not None if device == "cuda" else
                               set(map(str, CPU_CURVE_BYTES)) <= set(cached.copy_curve or {})):
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
                        method=f"torch on {torch.get_num_threads()} threads: copies of 256 KiB to 1 GiB, x2 apart "
                               f"(read+write bytes); fp32 and bf16 matmul {n}^3",
                        copy_curve=curve)
