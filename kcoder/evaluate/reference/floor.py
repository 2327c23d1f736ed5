"""The physical floor: the least time in which any correct implementation can return its
outputs. A candidate timed under it is refused on every device (issue 40, item 6).

What the floor counts, and why, so that it never refuses an honest kernel:
- Every output byte written once. No implementation escapes this: the outputs are checked, so
  they must be in memory when the call returns. An output that is one of the inputs, or a
  parameter or buffer (forward returns it as it is), costs nothing and is not counted.
- Every forward() argument read once, but only those the outputs depend on. The judge draws
  these fresh every call, so no implementation can have read them before; an argument the
  function ignores (or whose every draw is the same) need not be read, and the reference
  process finds those by drawing each argument afresh on its own and comparing the outputs
  (`influential`). An argument that influences only part of the outputs is still counted
  whole: the judge cannot tell which of its elements matter (the margin below covers some).
- Parameters and buffers are not counted: a verified rewrite may fold them (a weight the
  function multiplies by zero, a bias that a later mean cancels, a sum of a weight's rows
  precomputed), and their values are the same every call.
- No FLOPs. A verified rewrite of the graph may honestly do fewer FLOPs than the reference (on
  an H100, 14_Gemm_Divide_Sum_Scaling at 24x and 42_ConvTranspose2d_GlobalAvgPool at 49x vs
  torch.compile beat the FLOP-based speed of light, sol.py, which therefore stays a note).

At a copy rate the device was measured to reach, times FLOOR_MARGIN. Which rate:
- cpu (a DeviceLimits with a copy curve): the rate a copy of the bytes the floor counts reaches
  here (DeviceLimits.copy_rate_at_size), read off the curve and the problems' own sizes so that
  it is never below the truth between two measured sizes (the faster of the two, and the peak
  for a size under it), and the rate measured at the problem's own footprint when faster. Not
  the fastest rate at any smaller working set: the judge draws the inputs fresh for every call
  (written just before it), so a problem larger than the caches streams all but their last few
  MiB from memory, and no honest kernel moves it at the rate of a copy that fits in L2. The
  rule before (the fastest up to the footprint) put the floor of a 64 MiB problem at ~0.11 of
  its speed of light, and a C++ candidate that never read its 33 MB input (it returned a value
  precomputed from a parameter) was accepted at "426% of the speed of light". Now it is ~0.5
  of it, so the margin is all the room an honest kernel has, and a large copy measured on a
  busy host reads slow (measured on 2 shared cores: 12-21 GB/s where quiet ones copied 33-38
  at 128 MiB to 1 GiB): the rate at the problem's size is measured again in every evaluation and the
  fastest ever seen is kept (`measure_now`), so a slow first measurement does not stay.
- cuda: the fastest copy rate measured at any working set up to the problem's footprint
  (DeviceLimits.fastest_copy_up_to): the device's 1 GiB ceiling and the problems' own sizes
  not above it, as before. The reasoning above does not carry over: the judge flushes the L2
  before every call, so no input is cache-resident at any size, and the own-size rates are
  measured with the same flush; a smaller size is slower there (launch, too little in flight),
  faster than the ceiling only by the outputs its 50-60 MB L2 still holds when the copy ends,
  a small share of a problem many times that size, so a large problem's floor sits near
  FLOOR_MARGIN of its SOL already (the ceiling is the rate of both).
The figures come from the reference process (trusted: the candidate never runs there); the
judge only compares a time with them (`under_floor`), so it can feed the check any clock's
figure.
"""

from __future__ import annotations

import math
from typing import Any

from kcoder.evaluate.harness.verify import flatten_outputs

# The floor is this share of the time to move the bytes at the measured copy rate.
# Why not 1: a copy's bytes are counted read+write, and on a CPU each written line is first read
# (write-allocate), so a kernel that mostly reads moves bytes up to ~1.5x a copy's counted rate;
# torch's copy is not the fastest copy a tuned kernel can write; the rates are best-of-N figures
# on shared hosts. A time under half of it is no measurement error but work not done in the call.
FLOOR_MARGIN = 0.5
# On the cpu the rate is the copy's at the problem's own size (no cache's), which an honest
# kernel that only reads comes close to (mse_loss's solution reads at ~0.9 of it here), and the
# judge's figure there carries the host's load: a wider margin. The candidates the floor exists
# for do no work at all (the "426% of the speed of light" one ran at ~0.12 of this floor).
FLOOR_MARGIN_CPU = 0.3
SAMPLES = 4096  # output elements compared (evenly spaced) when looking for ignored inputs
FRESH_CALLS = 10  # copies timed when the cpu's rate at a problem's size is measured again (measure_now)


def under_floor(time_us: float | None, floor_us: float | None, basis: str) -> str:
    """The refusal when `time_us` (one call's time, from whichever clock) is under the physical
    floor `floor_us` (its `basis` in words), else ""."""
    if not floor_us or time_us is None or time_us >= floor_us:
        return ""
    return (f"integrity: {time_us:,.1f} us per call is under the physical floor of {floor_us:,.1f} us "
            f"({basis}): the outputs cannot have been computed in that time")


def floor_out_of_line(floor_us: float | None, baselines: dict[str, float | None]) -> str:
    """A note when a baseline (the reference's own code, trusted) ran under the floor: then the
    floor is wrong for this problem (an input read in part, a ceiling measured low) and is not
    applied; else ""."""
    below = [f"{name} {us:,.1f} us" for name, us in baselines.items() if floor_us and us and us < floor_us]
    if not below:
        return ""
    return (f"physical floor not applied: {', '.join(below)} ran under its {floor_us:,.1f} us "
            "(the floor overstates what this problem must move)")


def physical_floor(input_bytes: int, output_bytes: int, rate: float, ignored: int = 0,
                   margin: float = FLOOR_MARGIN) -> dict[str, Any]:
    """The floor in us and its basis in words, for `input_bytes` read and `output_bytes`
    written once at `rate` bytes/s, times `margin`; `ignored`: forward() arguments left out (not
    influential)."""
    floor_us = margin * (input_bytes + output_bytes) / rate * 1e6
    skipped = f", {ignored} argument{'s' if ignored > 1 else ''} the outputs ignore not counted" if ignored else ""
    basis = (f"{margin:g}x the time to read {_size(input_bytes)} of inputs once and write "
             f"{_size(output_bytes)} of outputs once at {rate / 1e9:,.1f} GB/s measured{skipped}")
    return {"floor_us": floor_us, "floor_basis": basis, "input_bytes": input_bytes, "output_bytes": output_bytes}


def floor_figures(torch: Any, model: Any, make_inputs: Any, seed: int, limits: Any, footprint: int,
                  own_rate: float | None = None, measure: bool = True) -> dict[str, Any]:
    """The floor of one problem (reference process): its bytes from a call on input set `seed`
    (`make_inputs(seed)` gives the arguments), the arguments the outputs depend on, and the copy
    rate (module docstring; `footprint`: the problem's tensors, each once; `own_rate`: the rate
    measured at the footprint, counted when faster): on the cpu a copy's at the bytes counted
    (not above `footprint`; `measure`: measured again now as well, `measure_now`), on a GPU the
    fastest up to `footprint`."""
    inputs = make_inputs(seed)
    with torch.no_grad():
        out = model(*inputs)
    per_input, output_bytes = io_bytes(torch, inputs, out, model)
    base = _fingerprint(torch, out)
    del inputs, out
    matters = influential(torch, model, make_inputs, seed, [n > 0 for n in per_input], base)
    input_bytes = sum(n for n, m in zip(per_input, matters, strict=True) if m)
    ignored = sum(1 for n, m in zip(per_input, matters, strict=True) if n and not m)
    margin = FLOOR_MARGIN
    if limits.copy_curve:  # the cpu: the rate at the size that must move, not a cache's
        size = min(input_bytes + output_bytes, footprint) or footprint
        if measure:
            measure_now(torch, limits, size)
        rate, margin = limits.copy_rate_at_size(size), FLOOR_MARGIN_CPU
    else:  # a GPU: the L2 is flushed before each call, and its ceiling is at 1 GiB
        rate = limits.fastest_copy_up_to(footprint)
    rate = max(rate, own_rate or 0.0)
    return physical_floor(input_bytes, output_bytes, rate, ignored, margin)


def measure_now(torch: Any, limits: Any, nbytes: int) -> None:
    """The cpu's copy rate at `nbytes` measured again now (evaluate/reference/sol.py copy_rate_at,
    FRESH_CALLS calls), kept with the device's ceilings when faster than the rate kept at that
    size: a rate measured on a busy host is too slow, and the floor it sets too high, so every
    evaluation of a problem gives its size another chance, and the floor only ever falls."""
    from kcoder.device_limits import save_limits
    from kcoder.evaluate.reference.sol import copy_rate_at

    try:
        rate = copy_rate_at(torch, "cpu", nbytes, calls=FRESH_CALLS)
    except Exception:  # out of memory, say: the rates kept still set the floor
        return
    kept = (limits.size_rates or {}).get(str(nbytes))
    if rate and not (isinstance(kept, (int, float)) and kept >= rate):
        limits.size_rates = {**(limits.size_rates or {}), str(nbytes): rate}
        save_limits(limits)


def io_bytes(torch: Any, inputs: list[Any], out: Any, model: Any) -> tuple[list[int], int]:
    """Bytes of each forward() argument (0 for a non-tensor, a storage already counted, or one
    an output returns) and of the outputs (0 for an argument's, parameter's or buffer's storage),
    each storage once and at most its own size (an expanded view is its storage)."""
    outs = [t for _, t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
    returned = {_key(t) for t in outs}
    per_input: list[int] = []
    seen: set[int] = set()
    for x in inputs:
        if isinstance(x, torch.Tensor) and _key(x) not in seen | returned:
            per_input.append(_storage_bytes(x, [t for t in inputs if isinstance(t, torch.Tensor)]))
            seen.add(_key(x))
        else:
            per_input.append(0)
    owned = {_key(t) for t in [*inputs, *model.parameters(), *model.buffers()] if isinstance(t, torch.Tensor)}
    output_bytes = 0
    for t in outs:
        if _key(t) not in owned:
            output_bytes += _storage_bytes(t, outs)
            owned.add(_key(t))
    return per_input, output_bytes


def _key(t: Any) -> int:
    return t.untyped_storage().data_ptr()


def _storage_bytes(t: Any, group: list[Any]) -> int:
    """The bytes of `t`'s storage that the tensors of `group` on it cover at most."""
    views = sum(v.nbytes for v in group if _key(v) == _key(t))
    return min(views, t.untyped_storage().nbytes())


def influential(torch: Any, model: Any, make_inputs: Any, seed: int, tensors: list[bool],
                base: list[float]) -> list[bool]:
    """For each forward() argument marked in `tensors`: whether a fresh draw of it alone (input
    set `seed` with that argument from another set) changes the outputs (`base`: the outputs'
    _fingerprint on input set `seed`). Exact unless two calls on the same inputs differ (then
    10x that gap must be passed); an argument that the check cannot decide (the call fails,
    memory runs out) counts as ignored: a floor set too low only believes more. Costs a
    reference call and one per argument."""
    other = seed % (2**31 - 2) + 1

    def call(swap: int | None = None) -> list[float]:
        alt = make_inputs(other)[swap] if swap is not None else None  # drawn first: the seed below
        inputs = make_inputs(seed)  # is the last one set, so forward's own draws are the same
        if swap is not None:
            inputs[swap] = alt
        with torch.no_grad():
            return _fingerprint(torch, model(*inputs))

    try:
        noise = _gap(base, call())
        return [bool(marked) and _gap(base, call(i)) > 10 * noise for i, marked in enumerate(tensors)]
    except Exception:  # undecided: no argument is counted (the outputs alone still are)
        return [False] * len(tensors)


def _fingerprint(torch: Any, out: Any) -> list[float]:
    """Each output's float64 sum and SAMPLES evenly spaced elements."""
    values: list[float] = []
    for _, t in flatten_outputs(out):
        if not isinstance(t, torch.Tensor):
            values.append(float(t) if isinstance(t, (int, float)) else float(hash(repr(t)) % 9973))
            continue
        flat = (torch.view_as_real(t) if t.is_complex() else t).detach().reshape(-1)
        if not flat.numel():
            continue
        # integer steps: a float32 linspace rounds its last point past the end above 2**24 elements
        # (an index out of bounds: a device-side assert on the GPU that ends the reference process)
        count = min(SAMPLES, flat.numel())
        index = torch.arange(count, device=flat.device) * (flat.numel() - 1) // max(count - 1, 1)
        values.append(flat.sum(dtype=torch.float64).item())
        values += flat[index].double().tolist()
    return values


def _gap(a: list[float], b: list[float]) -> float:
    """The largest difference between two fingerprints, relative to the first's largest value
    (NaN and infinities equal to themselves)."""
    if len(a) != len(b):
        return math.inf
    scale = max((abs(x) for x in a if math.isfinite(x)), default=0.0) or 1.0
    same = [x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True)]
    return max((abs(x - y) / scale for x, y, s in zip(a, b, same, strict=True) if not s), default=0.0)


def _size(nbytes: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):,.1f} {unit}"
    return f"{int(nbytes)} B"
