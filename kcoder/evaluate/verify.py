"""Verification: does ModelNew compute what Model computes, on fresh inputs, honestly?

For each of >= 5 input sets (distinct seeds): the candidate runs first, under the guard and
with fresh allocations poisoned (NaN for floats); its inputs must be unchanged afterwards;
its outputs must not alias an input or an earlier output; then the reference runs on a
pristine copy and the outputs are compared (see compare.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kcoder.evaluate.compare import (
    ErrorStats,
    Mismatch,
    compare_outputs,
    flatten_outputs,
    zeros_would_pass,
)


class CandidateFailure(Exception):
    """The candidate failed a check; the message is the verdict's one-line reason."""


@dataclass
class VerifyResult:
    stats: ErrorStats
    n_sets: int
    reference_mutates_inputs: bool = False
    notes: list[str] = field(default_factory=list)


def make_inputs(problem: Any, seed: int, device: str) -> list[Any]:
    """Inputs from the problem's get_inputs() under `seed`, placed on `device`."""
    import torch

    torch.manual_seed(seed)
    with torch.device(device):
        raw = problem.get_inputs()
    if not isinstance(raw, (list, tuple)):
        raise ProblemInputError(f"get_inputs() returned {type(raw).__name__}, expected a list")
    return [_to_device(x, device, i) for i, x in enumerate(raw)]


class ProblemInputError(Exception):
    """The problem's get_inputs()/get_init_inputs() gave something unusable."""


def _to_device(x: Any, device: str, i: int) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (int, float, bool)) or x is None:
        return x
    if isinstance(x, (list, tuple)) and all(isinstance(v, (int, float, bool)) for v in x):
        return x
    raise ProblemInputError(
        f"get_inputs()[{i}] is a {type(x).__name__}; inputs must be tensors or scalars")


def clone_inputs(inputs: list[Any]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def inputs_equal(a: list[Any], b: list[Any]) -> bool:
    """Bitwise-equal (NaN equal to NaN) and same metadata."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or x.stride() != y.stride():
                return False
            if x.is_floating_point() or x.is_complex():
                same = (x == y) | (torch.isnan(x) & torch.isnan(y))
                if not bool(same.all()):
                    return False
            elif not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Fill fresh torch allocations (empty, empty_like, ... also from C++) with NaN/max-int,
    so an output the kernel never wrote cannot pass by luck or by stale memory."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill_before = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill_before


def storages(values: Any) -> set[int]:
    import torch

    return {leaf.untyped_storage().data_ptr() for _, leaf in flatten_outputs(values)
            if isinstance(leaf, torch.Tensor) and leaf.numel() > 0}


def guarded_call(model: Any, inputs: list[Any], guard: Any, sync: Callable[[], None]) -> Any:
    """Run the candidate under the guard and with poisoned allocations."""
    import torch

    try:
        with torch.no_grad(), poisoned_allocations(), guard.active():
            try:
                out = model(*inputs)
            finally:
                sync()
    except Exception:
        # A refused op surfaces as GuardViolation, or as RuntimeError when raised under C++.
        if guard.violations:
            raise CandidateFailure(f"fallback refused: {guard.violations[0].describe()}") from None
        raise
    if guard.violations:
        raise CandidateFailure(f"fallback refused: {guard.violations[0].describe()}")
    return out


def verify(problem: Any, ref_model: Any, new_model: Any, *, device: str, n_sets: int, seed: int,
           precision: str, guard: Any, sync: Callable[[], None],
           integrity: Callable[[str], None]) -> VerifyResult:
    """Run the correctness checks; raise CandidateFailure with the first problem found."""
    import torch

    total = ErrorStats()
    earlier_outputs: list[Any] = []  # kept alive so their memory cannot be handed out again
    first_ref: Any = None
    reference_varies = False
    mutates = False
    threads_before = threading.active_count()
    for s in range(n_sets):
        inputs = make_inputs(problem, seed + 1000 + s, device)
        pristine = clone_inputs(inputs)
        out = guarded_call(new_model, inputs, guard, sync)
        integrity(f"verification call {s + 1}")
        if threading.active_count() != threads_before:
            raise CandidateFailure("integrity: the candidate started Python threads")
        if not inputs_equal(inputs, pristine):
            raise CandidateFailure(f"input set {s + 1}: the candidate modified its inputs")
        input_storages = storages(inputs)
        out_storages = storages(out)
        if out_storages & input_storages:
            raise CandidateFailure(f"input set {s + 1}: an output aliases an input tensor")
        if out_storages & storages(earlier_outputs):
            raise CandidateFailure(f"input set {s + 1}: an output reuses an earlier call's output "
                                   "tensor (cached result)")
        ref_inputs = clone_inputs(pristine)
        with torch.no_grad():
            ref = ref_model(*ref_inputs)
            sync()
        mutates = mutates or not inputs_equal(ref_inputs, pristine)
        try:
            total.merge(compare_outputs(out, ref, precision))
        except Mismatch as exc:
            raise CandidateFailure(f"wrong answer on input set {s + 1} of {n_sets}: {exc}") from None
        earlier_outputs.append(out)
        if first_ref is None:
            first_ref = ref
        elif not reference_varies:
            reference_varies = not _same_values(ref, first_ref)
    notes = []
    if not reference_varies:
        notes.append("degenerate problem: the reference output is identical for every input set; "
                     "correctness was decided by the relative-norm check")
    if zeros_would_pass(ref, precision):
        notes.append("degenerate problem: an all-zeros answer is within tolerance of the reference")
    return VerifyResult(total, n_sets, mutates, notes)


def _same_values(a: Any, b: Any) -> bool:
    """Bitwise-equal outputs (NaN equal to NaN), leaf by leaf."""
    import torch

    leaves_a, leaves_b = flatten_outputs(a), flatten_outputs(b)
    if len(leaves_a) != len(leaves_b):
        return False
    for (_, x), (_, y) in zip(leaves_a, leaves_b, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not inputs_equal([x], [y]):
                return False
        elif x != y:
            return False
    return True
