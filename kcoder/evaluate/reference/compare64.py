"""The float64 rule: a second opinion where the float32 tolerance refuses a float32 output.

Where an output is a small difference of large terms (the mean of group-normalized values,
a variance), every summation order rounds differently, and eager's float32 answer is itself
off by more than the float32 tolerance allows: comparing two roundings with each other then
refuses correct kernels. This rule compares both with a float64 answer instead (Model run in
float64 on the same inputs and weights, upcast exactly, in the reference process) and accepts
the candidate where its error is within FACTOR times eager float32's own error:

  per element: |out - ref64| <= F * (|eager - ref64| + T * rms(eager - ref64)) + floor
  as a norm:   ||out - ref64|| <= F * ||eager - ref64|| + floor * sqrt(n)

T = sqrt(2 ln 2n) is about the largest of n normal draws in standard deviations (a correct
order's error is as large as eager's somewhere else, where eager's happens to be small), and
floor is a float32 rounding of a typical output value (eps * rms(ref64)). The rule is
consulted only after the float32 rule refused values (never structure, dtype or NaN
positions), only for float32 outputs, and it is OR'd with that rule: whatever passes the
float32 tolerance passes. A wrong answer still fails: zeros, or 1e-3 off where eager is 1e-7
off. Outputs are compared in chunks, in float64.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from kcoder.evaluate.reference import compare
from kcoder.evaluate.reference.compare import ErrorStats, Mismatch, ToleranceMismatch, compare_outputs, flatten_outputs

FACTOR = 4.0
FLOAT32_EPS = 2.0 ** -23
# The float64 run's inputs and outputs (upcast copies) at most this many bytes; larger
# problems keep the float32 rule alone (the refusal says so).
MAX_BYTES = 8 * 2**30


class Float64Unavailable(Exception):
    """The float64 reference could not be computed (too large, an op without float64...)."""


def float64_applies(ref: Any) -> bool:
    """Whether every floating tensor output of the reference is float32."""
    import torch

    leaves = [t for _, t in flatten_outputs(ref) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return bool(leaves) and all(t.dtype == torch.float32 for t in leaves)


def upcast(values: Any) -> Any:
    """float32 tensors (in lists/tuples too) as float64 copies; everything else as it is."""
    import torch

    if isinstance(values, torch.Tensor):
        return values.to(torch.float64) if values.dtype == torch.float32 else values
    if isinstance(values, (list, tuple)):
        return type(values)(upcast(v) for v in values)
    return values


def float64_model(model: Any) -> Any:
    """A float64 copy of the model (parameters and floating buffers converted exactly)."""
    return copy.deepcopy(model).double()


def second_opinion(refusal: Mismatch, out: Any, ref: Any, make_ref64: Callable[[], Any],
                   precision: str) -> tuple[ErrorStats, str]:
    """After the float32 rule refused `out` (`refusal`): the float64 rule's verdict. Returns
    the error statistics and a note naming the rule that accepted it; raises Mismatch (the
    float32 refusal, with the float64 rule's finding) when it refuses too or cannot apply."""
    if not isinstance(refusal, ToleranceMismatch) or not float64_applies(ref):
        raise refusal
    try:
        ref64 = make_ref64()
    except Float64Unavailable as why:
        raise Mismatch(f"{refusal}; the float64 rule could not be applied: {why}") from None
    return compare_float64(out, ref, ref64, precision, str(refusal))


def compare_float64(out: Any, ref: Any, ref64: Any, precision: str, refusal: str = "") -> tuple[ErrorStats, str]:
    """Each output leaf passes the float32 rule or the float64 rule (module docstring)."""
    import torch

    leaves, leaves64 = flatten_outputs(ref), flatten_outputs(ref64)
    outs = flatten_outputs(out)
    if len(leaves64) != len(leaves) or len(outs) != len(leaves):
        raise Mismatch(f"{refusal}; the float64 rule could not be applied: Model's float64 run gave "
                       f"{len(leaves64)} outputs, not {len(leaves)}")
    stats, notes = ErrorStats(), []
    for (path, o), (_, r), (_, d) in zip(outs, leaves, leaves64, strict=True):
        try:
            stats.merge(compare._compare_tensor(path, o, r, precision) if isinstance(r, torch.Tensor)
                        else compare_outputs(o, r, precision))
            continue
        except ToleranceMismatch as exc:
            first = str(exc)
        if not isinstance(d, torch.Tensor) or d.dtype != torch.float64 or d.shape != r.shape:
            got = _kind(d)
            raise Mismatch(f"{first}; the float64 rule could not be applied: Model's float64 run gave {got} "
                           f"at {path}") from None
        leaf, note = _float64_leaf(path, o, r, d.to(r.device), first)
        rtol, norm_tol = compare.tolerance_for(r.dtype, precision)
        leaf.tolerance = {"rtol": rtol, "norm_tol": norm_tol, "float64_factor": FACTOR}
        stats.merge(leaf)
        notes.append(note)
    return stats, "; ".join(notes)


def _kind(x: Any) -> str:
    import torch

    return f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def _float64_leaf(path: str, out: Any, ref: Any, ref64: Any, refusal: str) -> tuple[ErrorStats, str]:
    """One float32 output against its float64 reference; raises Mismatch when it fails."""
    import torch

    o_flat, r_flat, d_flat = out.reshape(-1), ref.reshape(-1), ref64.reshape(-1)
    chunk = compare._chunk_elements(ref)
    all_finite = compare._check_nonfinite(path, o_flat, r_flat, chunk)  # matched already: this finds which
    n = e_sq = c_sq = d_sq = 0.0
    e_max = c_max = 0.0
    for _, c, e, d, count in _errors(o_flat, r_flat, d_flat, chunk, all_finite, refusal):
        n += count
        e_sq += float(e.square().sum())
        c_sq += float(c.square().sum())
        d_sq += float(d.square().sum())
        e_max, c_max = max(e_max, float(e.max())), max(c_max, float(c.max()))
    n = max(n, 1.0)
    rms_e, rms_d = math.sqrt(e_sq / n), math.sqrt(d_sq / n)
    floor = FLOAT32_EPS * rms_d
    spread = math.sqrt(2.0 * math.log(2.0 * n)) * rms_e
    n_over, first, max_rel = 0, None, 0.0
    for start, c, e, d, _ in _errors(o_flat, r_flat, d_flat, chunk, all_finite, refusal):
        allowed = e.add_(spread).mul_(FACTOR).add_(floor)
        over = c > allowed
        count = int(over.sum())
        if count and first is None:
            i = int(over.nonzero()[0])
            first = (start + i, float(c[i]), float(allowed[i]))
        n_over += count
        max_rel = max(max_rel, float((c / (d.abs_() + rms_d + 1e-300)).max()))
    c_norm, e_norm = math.sqrt(c_sq), math.sqrt(e_sq)
    norm_limit = FACTOR * e_norm + floor * math.sqrt(n)
    own = (f"float32 eager's own error against it: max {e_max:.3g}, norm {e_norm:.3g}; "
           f"the candidate's: max {c_max:.3g}, norm {c_norm:.3g}")
    if first is not None:
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(first[0]), ref.shape))
        raise Mismatch(f"{refusal}; against Model run in float64 {n_over} elements are also outside "
                       f"{FACTOR:g}x eager's error (first at {where}: error {first[1]:.3g}, allowed "
                       f"{first[2]:.3g}; {own})")
    if c_norm > norm_limit:
        raise Mismatch(f"{refusal}; against Model run in float64 its error norm {c_norm:.3g} is also over "
                       f"{FACTOR:g}x eager's ({norm_limit:.3g}; {own})")
    rel_norm = c_norm / math.sqrt(d_sq) if d_sq else c_norm
    stats = ErrorStats(max_abs_err=c_max, max_rel_err=max_rel, rel_norm_err=rel_norm)
    note = (f"{path} accepted by the float64 rule, not the float32 tolerance against eager (which refused it): "
            f"against Model run in float64 its error is within {FACTOR:g}x eager float32's own, per element and "
            f"as a norm ({own})")
    return stats, note


def _errors(o_flat: Any, r_flat: Any, d_flat: Any, chunk: int, all_finite: bool, refusal: str) -> Any:
    """(offset, |out - ref64|, |eager - ref64|, ref64, finite count) per chunk, fresh float64
    tensors; positions where eager's output is not finite are zeroed in all three (NaN/Inf
    positions matched already) and not counted."""
    import torch

    for start in range(0, r_flat.numel(), chunk):
        r = r_flat[start:start + chunk]
        d = d_flat[start:start + chunk].to(torch.float64, copy=True)
        o = o_flat[start:start + chunk].to(torch.float64, copy=True)
        count = r.numel()
        if not all_finite:
            finite = torch.isfinite(r)
            if not bool(torch.isfinite(d[finite]).all()):
                raise Mismatch(f"{refusal}; the float64 rule could not be applied: Model's float64 run is not "
                               "finite where its float32 run is")
            o, d = torch.where(finite, o, 0.0), torch.where(finite, d, 0.0)
            r = torch.where(finite, r, 0.0)
            count = int(finite.sum())
        elif not bool(torch.isfinite(d).all()):
            raise Mismatch(f"{refusal}; the float64 rule could not be applied: Model's float64 run is not "
                           "finite where its float32 run is")
        yield start, o.sub_(d).abs_(), r.to(torch.float64).sub_(d).abs_(), d, count
