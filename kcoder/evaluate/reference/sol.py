"""Speed of light: the least time the device could take for the reference's work.

Counted in the reference process (trusted; the candidate never runs there): the FLOPs of one
reference call (torch's flop counter: matmuls, convolutions, attention; elementwise work
counts nothing, so such problems are bounded by memory alone) and the bytes that any
implementation must move at least (inputs + parameters and buffers + outputs, each tensor
once). With the device's measured ceilings (device_limits.py):
SOL = max(bytes / copy bandwidth, FLOPs / matmul rate allowed by the precision policy).
"""

from __future__ import annotations

from typing import Any


def count_work(torch: Any, model: Any, inputs: list[Any]) -> dict[str, Any]:
    """FLOPs and minimum bytes of one call of `model` on `inputs` (flops None when torch's
    counter cannot run it)."""
    from torch.utils.flop_counter import FlopCounterMode

    from kcoder.evaluate.harness.verify import flatten_outputs

    flops: float | None
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            out = model(*inputs)
        flops = float(counter.get_total_flops())
    except Exception:  # an op the counter's mode cannot run: the memory bound still holds
        with torch.no_grad():
            out = model(*inputs)
        flops = None
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    tensors += [t for _, t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:  # each storage once: an output may be an input, a parameter shared
        key = (t.untyped_storage().data_ptr(), t.nbytes)
        if key not in seen:
            seen.add(key)
            total += t.nbytes
    return {"flops": flops, "min_bytes": total}


def speed_of_light(work: dict[str, Any], limits: Any, precision: str, own_size_rate: float | None = None
                   ) -> dict[str, Any]:
    """The SOL time in us from `work` (count_work) and a DeviceLimits, the bound that sets
    it, and the ceilings used, in words. `own_size_rate`: the copy rate measured at the
    problem's own size (copy_rate_at); the faster of it and the device's ceiling bounds the
    memory time, so a problem whose data stays in a cache cannot beat its SOL."""
    nbytes, flops = work["min_bytes"], work["flops"] or 0.0
    bandwidth = limits.bandwidth_for(nbytes)
    where = ""
    if own_size_rate and own_size_rate > bandwidth:
        bandwidth, where = own_size_rate, f" at the problem's size ({nbytes / 2**20:,.1f} MiB)"
    rate = limits.flops_per_s(precision)
    memory_s, compute_s = nbytes / bandwidth, flops / rate
    return {**work, "sol_us": max(memory_s, compute_s) * 1e6,
            "sol_bound": "memory" if memory_s >= compute_s else "compute",
            "sol_ceilings": (f"{limits.device}: copy {bandwidth / 1e9:,.1f} GB/s{where}, "
                             f"{'relaxed' if precision == 'relaxed' else 'fp32'} matmul "
                             f"{rate / 1e12:,.2f} TFLOP/s (measured)")}


OWN_SIZE_MAX_BYTES = 1 << 30  # above this the device's 1 GiB copy is the problem's own size already
OWN_SIZE_CALLS = 20


def own_size_rate(torch: Any, device: str, limits: Any, nbytes: int) -> float | None:
    """The copy rate at `nbytes` (copy_rate_at): kept with the device's ceilings (a property of
    the device at that size, measured once), else measured now and saved there."""
    from kcoder.device_limits import save_limits

    rates = dict(limits.size_rates or {})
    if isinstance(rates.get(str(nbytes)), (int, float)):
        return float(rates[str(nbytes)])
    rate = copy_rate_at(torch, device, nbytes)
    if rate:
        rates[str(nbytes)] = rate
        limits.size_rates = rates
        save_limits(limits)
    return rate


def copy_rate_at(torch: Any, device: str, nbytes: int, calls: int = OWN_SIZE_CALLS) -> float | None:
    """Read+write bytes per second of one copy whose source and destination are `nbytes`
    together, timed as the timing loop times a call (timing.Clock: on a GPU the same L2 flush,
    head start and events) with its source written just before, as a fresh input is; the best
    of `calls`. None for sizes where the device's own ceiling stands (empty or over 1 GiB)."""
    from kcoder.evaluate.harness.timing import Clock

    if not 0 < nbytes <= OWN_SIZE_MAX_BYTES:
        return None
    half = max(1, nbytes // 2)
    src = torch.empty(half, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    clock = Clock(device)
    best = float("inf")
    for i in range(calls + 1):
        src.fill_(i % 251)  # written now, as make_inputs writes a round's inputs
        _, read = clock.call(lambda a, b: b.copy_(a), [src, dst])
        clock.sync()
        if i:  # the first call teaches nothing (allocator, lazy init)
            best = min(best, read())
    return 2 * half / (best * 1e-6) if best > 0 else None


def record_sol(verdict: Any, figures: dict[str, Any]) -> None:
    """The reference process's SOL and physical floor figures into the verdict (judge side:
    only numbers and lines of text are taken)."""
    if figures.get("sol_error"):
        verdict.notes.append(f"speed of light not measured: {str(figures['sol_error'])[:200]}")
        return
    for name in ("flops", "min_bytes", "sol_us", "floor_us"):
        value = figures.get(name)
        if isinstance(value, (int, float)) and value >= 0:
            setattr(verdict, name, round(float(value), 3) if name.endswith("_us") else value)
    if figures.get("sol_bound") in ("memory", "compute"):
        verdict.sol_bound = figures["sol_bound"]
    verdict.sol_ceilings = str(figures.get("sol_ceilings", ""))[:200]
    verdict.floor_basis = str(figures.get("floor_basis", ""))[:200]
    if figures.get("floor_error"):
        verdict.notes.append(f"physical floor not measured: {str(figures['floor_error'])[:200]}")


def sol_fraction(sol_us: float | None, time_us: float | None) -> float | None:
    """The share of the speed of light an implementation reaches (1.0: at the SOL)."""
    if not sol_us or not time_us:
        return None
    return float(f"{sol_us / time_us:.4g}")  # 4 significant digits: small shares stay exact enough
