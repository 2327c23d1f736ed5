"""Comparing a candidate's output with the reference's: structure, type, and values.

Tolerances are dtype-aware and depend on the precision policy. A value passes when both
  elementwise: |out - ref| <= rtol * (|ref| + rms(ref)) + 1e-6 * rtol, and
  norm-wise:   ||out - ref|| / ||ref|| <= norm_tol
hold, and NaN/Inf appear at exactly the same positions. The norm check is what makes an
all-zeros (or constant) answer fail even when outputs are tiny. Values of a float32 output
that this rule refuses get a second opinion against a float64 reference (compare64.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kcoder.evaluate.harness.verify import flatten_outputs

# (elementwise rtol, relative-norm tolerance) per dtype name and precision policy.
_TOLERANCES = {
    ("float32", "strict"): (1e-4, 5e-5),
    ("float32", "relaxed"): (2e-2, 1e-2),
    ("float64", "strict"): (1e-7, 1e-8),
    ("float64", "relaxed"): (1e-4, 5e-5),
    ("float16", "strict"): (1e-2, 5e-3),
    ("float16", "relaxed"): (2e-2, 1e-2),
    ("bfloat16", "strict"): (2e-2, 1e-2),
    ("bfloat16", "relaxed"): (4e-2, 2e-2),
}


def tolerance_for(dtype: Any, precision: str) -> tuple[float, float]:
    """(rtol, norm_tol) for a floating dtype; integers and bools compare exactly (0, 0)."""
    name = str(dtype).replace("torch.", "")
    if name.startswith("complex"):
        name = "float64" if name == "complex128" else "float32"
    return _TOLERANCES.get((name, precision), (0.0, 0.0))


class Mismatch(Exception):
    """The candidate's output differs from the reference. The message says how."""


class ToleranceMismatch(Mismatch):
    """Values outside the float32 tolerance (structure, dtype and NaN positions matched): the
    float64 rule may still accept them (compare64.py)."""


@dataclass
class ErrorStats:
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_norm_err: float = 0.0
    tolerance: dict[str, float] = field(default_factory=dict)

    def merge(self, other: ErrorStats) -> None:
        self.max_abs_err = max(self.max_abs_err, other.max_abs_err)
        self.max_rel_err = max(self.max_rel_err, other.max_rel_err)
        self.rel_norm_err = max(self.rel_norm_err, other.rel_norm_err)
        self.tolerance = self.tolerance or other.tolerance


def compare_outputs(out: Any, ref: Any, precision: str) -> ErrorStats:
    """Raise Mismatch unless `out` matches `ref`; return the error statistics."""
    import torch

    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            raise Mismatch(f"output structure differs: expected {type(ref).__name__} of "
                           f"{len(ref)}, got {_describe(out)}")
    out_leaves, ref_leaves = flatten_outputs(out), flatten_outputs(ref)
    if len(out_leaves) != len(ref_leaves):
        raise Mismatch(f"expected {len(ref_leaves)} outputs, got {len(out_leaves)}")
    stats = ErrorStats()
    for (path, o), (_, r) in zip(out_leaves, ref_leaves, strict=True):
        if isinstance(r, torch.Tensor):
            stats.merge(_compare_tensor(path, o, r, precision))
        elif isinstance(r, (int, float, bool)) or r is None:
            if isinstance(o, torch.Tensor) or type(o) is not type(r):
                raise Mismatch(f"{path}: expected {type(r).__name__}, got {_describe(o)}")
            if isinstance(r, float):
                rtol, _ = tolerance_for("float64" if precision == "strict" else "float32", precision)
                if not abs(o - r) <= rtol * abs(r) + 1e-12:
                    raise Mismatch(f"{path}: expected {r!r}, got {o!r}")
            elif o != r:
                raise Mismatch(f"{path}: expected {r!r}, got {o!r}")
        else:
            raise Mismatch(f"{path}: unsupported reference output type {type(r).__name__}")
    return stats


def _describe(x: Any) -> str:
    import torch

    if isinstance(x, torch.Tensor):
        return f"{type(x).__name__}{tuple(x.shape)} {x.dtype} on {x.device}"
    return type(x).__name__


def _compare_tensor(path: str, out: Any, ref: Any, precision: str) -> ErrorStats:
    import torch

    if type(out) is not torch.Tensor:
        raise Mismatch(f"{path}: expected a plain torch.Tensor, got {_describe(out)} "
                       "(subclasses and lazy tensors are refused)")
    for attr in ("shape", "dtype", "device"):
        if getattr(out, attr) != getattr(ref, attr):
            raise Mismatch(f"{path}: {attr} {getattr(out, attr)} != reference {getattr(ref, attr)}")
    if out.layout != ref.layout:
        raise Mismatch(f"{path}: layout {out.layout} != reference {ref.layout}")
    if out.is_complex():
        out, ref = torch.view_as_real(out), torch.view_as_real(ref)
    rtol, norm_tol = tolerance_for(ref.dtype, precision)
    tol = {"rtol": rtol, "norm_tol": norm_tol}
    if not ref.dtype.is_floating_point:
        if not torch.equal(out, ref):
            bad = int((out != ref).sum())
            raise Mismatch(f"{path}: {bad} of {ref.numel()} {ref.dtype} elements differ (exact match required)")
        return ErrorStats(tolerance=tol)
    if ref.numel() == 0:
        return ErrorStats(tolerance=tol)
    o_flat, r_flat = out.reshape(-1), ref.reshape(-1)
    chunk = _chunk_elements(ref)
    all_finite = _check_nonfinite(path, o_flat, r_flat, chunk)
    ref_sq = sum(float(torch.linalg.vector_norm(r, dtype=torch.float64)) ** 2
                 for _, _, r in _chunks(o_flat, r_flat, chunk, all_finite))
    rms = math.sqrt(ref_sq / ref.numel())
    ref_norm = math.sqrt(ref_sq)
    stats = ErrorStats(tolerance=tol)
    diff_sq, n_over, first_over = 0.0, 0, None
    for start, o, r in _chunks(o_flat, r_flat, chunk, all_finite):
        diff = o.sub_(r).abs_()
        scale = r.abs().add_(rms)
        stats.max_abs_err = max(stats.max_abs_err, float(diff.max()))
        diff_sq += float(torch.linalg.vector_norm(diff, dtype=torch.float64)) ** 2
        over = diff > scale * rtol + 1e-6 * rtol
        stats.max_rel_err = max(stats.max_rel_err, float(diff.div_(scale.add_(1e-30)).max()))
        count = int(over.sum())
        if count and first_over is None:
            first_over = start + int(over.nonzero()[0])
        n_over += count
    diff_norm = math.sqrt(diff_sq)
    stats.rel_norm_err = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    if n_over:
        idx = first_over
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(idx), ref.shape))
        raise ToleranceMismatch(
            f"{path}: {n_over} of {ref.numel()} elements outside tolerance "
            f"(first at {where}: got {float(o_flat[idx]):.6g}, expected "
            f"{float(r_flat[idx]):.6g}; max abs err {stats.max_abs_err:.3g}, rtol {rtol:g})")
    limit = norm_tol if ref_norm > 0 else 1e-6 * rtol
    if stats.rel_norm_err > limit:
        raise ToleranceMismatch(f"{path}: relative error norm {stats.rel_norm_err:.3g} exceeds {limit:g} "
                       f"for {ref.dtype} ({precision} precision)")
    return stats


# Elements per comparison chunk: memory stays bounded whatever the output's size. On the
# host, chunks small enough for the allocator to reuse (large ones are fresh, zeroed pages).
CHUNK = 1 << 24
HOST_CHUNK = 1 << 20


def _chunk_elements(ref: Any) -> int:
    return CHUNK if ref.device.type == "cuda" else HOST_CHUNK


def _chunks(o_flat: Any, r_flat: Any, chunk: int, all_finite: bool) -> Any:
    """(offset, out, ref) per chunk in the comparison dtype (float64 for float64 outputs,
    float32 otherwise: differences of float32 values are exact enough for every tolerance
    used). Non-finite reference positions are zeroed in both (their positions were
    compared exactly before). `out` is a fresh tensor the caller may modify."""
    import torch

    dtype = torch.float64 if r_flat.dtype == torch.float64 else torch.float32
    for start in range(0, r_flat.numel(), chunk):
        o = o_flat[start:start + chunk].to(dtype, copy=True)
        r = r_flat[start:start + chunk].to(dtype)
        if not all_finite:
            finite = torch.isfinite(r)
            o, r = torch.where(finite, o, 0.0), torch.where(finite, r, 0.0)
        yield start, o, r


def _check_nonfinite(path: str, o_flat: Any, r_flat: Any, chunk: int) -> bool:
    """NaN, +Inf and -Inf must sit at exactly the reference's positions (chunk by chunk).
    Returns whether both are finite everywhere (the common case, checked in one pass)."""
    import torch

    if all(bool(torch.isfinite(t[s:s + chunk]).all()) for t in (o_flat, r_flat)
           for s in range(0, r_flat.numel(), chunk)):
        return True
    tests = (("NaN", torch.isnan), ("+Inf", lambda t: t == float("inf")), ("-Inf", lambda t: t == float("-inf")))
    for name, fn in tests:
        extra = missing = 0
        for start in range(0, r_flat.numel(), chunk):
            mo, mr = fn(o_flat[start:start + chunk]), fn(r_flat[start:start + chunk])
            extra += int((mo & ~mr).sum())
            missing += int((mr & ~mo).sum())
        if extra or missing:
            hint = " (unwritten output memory is poisoned with NaN)" if name == "NaN" and extra else ""
            raise Mismatch(f"{path}: {name} positions differ from the reference "
                           f"({extra} unexpected, {missing} missing){hint}")
    return False


def zeros_would_pass(ref: Any, precision: str) -> bool:
    """Would an all-zeros answer pass? Only when every tensor leaf of the reference is zero:
    the relative-norm check fails zeros for any nonzero floating reference, and integers
    compare exactly (NaN counts as nonzero, and its position would differ)."""
    import torch

    return all(not bool(leaf.any()) for _, leaf in flatten_outputs(ref)
               if isinstance(leaf, torch.Tensor) and leaf.numel())
