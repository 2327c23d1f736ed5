"""Verification: does ModelNew compute what Model computes, on fresh inputs, honestly?

The candidate's process calls the candidate under the guard with fresh allocations poisoned
(NaN for floats), then checks that its inputs are unchanged and that no output aliases an
input or an earlier output; the reference process compares the outputs (compare.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def flatten_outputs(out: Any, path: str = "output") -> list[tuple[str, Any]]:
    """Flatten nested tuples/lists of outputs into (path, leaf) pairs."""
    if isinstance(out, (tuple, list)):
        leaves: list[tuple[str, Any]] = []
        for i, item in enumerate(out):
            leaves.extend(flatten_outputs(item, f"{path}[{i}]"))
        return leaves
    return [(path, out)]


class CandidateFailure(Exception):
    """The candidate failed a check; the message is the verdict's one-line reason."""


def make_inputs(problem: Any, seed: int, device: str) -> list[Any]:
    """Inputs from the problem's get_inputs() under `seed`, placed on `device`."""
    import torch

    torch.manual_seed(seed)
    with torch.device(device):
        raw = problem.get_inputs()
    if not isinstance(raw, (list, tuple)):
        raise ProblemInputError(f"get_inputs() returned {type(raw).__name__}, expected a list")
    return [_to_device(x, device, i) for i, x in enumerate(raw)]


def batch_positions(inputs: list[Any]) -> list[int]:
    """The inputs that carry the batch: every tensor whose leading dim is the first tensor's."""
    import torch

    tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dim() > 0]
    return [i for i in tensors if inputs[i].shape[0] == inputs[tensors[0]].shape[0]] if tensors else []


def batch_inputs(problem: Any, seed: int, device: str, rows: int) -> list[Any]:
    """Input set `seed` with `rows` rows in each input that carries the batch: the rows of
    consecutive draws of get_inputs() (seeds seed, seed + 1 ...), so every value keeps the
    problem's own kind (an index stays in range, a mask a mask); the other inputs as drawn."""
    import torch

    first = make_inputs(problem, seed, device)
    scaled = batch_positions(first)
    if not scaled:
        return first
    draws, batch = [first], first[scaled[0]].shape[0]
    while batch * len(draws) < rows:
        draws.append(make_inputs(problem, seed + len(draws), device))
    return [torch.cat([d[i] for d in draws])[:rows].clone() if i in scaled else x for i, x in enumerate(first)]


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


def inputs_equal(a: list[Any], b: list[Any]) -> bool:
    """Bitwise-equal (NaN equal to NaN) and same metadata."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or x.stride() != y.stride():
                return False
            if not all(_chunk_equal(torch, u, v) for u, v in _chunks(x, y)):
                return False
        elif x != y:
            return False
    return True


EQUAL_CHUNK = 1 << 26  # elements compared at a time: the comparison's temporaries stay small


def _chunks(x: Any, y: Any) -> Iterator[tuple[Any, Any]]:
    """Matching pieces of two same-shaped tensors (the whole tensors when not contiguous)."""
    if not (x.is_contiguous() and y.is_contiguous()) or x.numel() <= EQUAL_CHUNK:
        yield x, y
        return
    xf, yf = x.view(-1), y.view(-1)
    for start in range(0, xf.numel(), EQUAL_CHUNK):
        yield xf[start:start + EQUAL_CHUNK], yf[start:start + EQUAL_CHUNK]


def _chunk_equal(torch: Any, x: Any, y: Any) -> bool:
    if x.is_floating_point() or x.is_complex():
        return bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all())
    return torch.equal(x, y)


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Fill fresh torch allocations (empty, empty_like, ... also from C++) with NaN/max-int,
    so an output the kernel never wrote cannot pass by luck or by stale memory."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill_before = torch.utils.deterministic.fill_uninitialized_memory
    _set_deterministic(torch, True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        _set_deterministic(torch, before, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill_before


def _set_deterministic(torch: Any, mode: bool, warn_only: bool) -> None:
    """torch.use_deterministic_algorithms without its import of torch._inductor (seconds,
    once per process; inductor's own flag does not matter in the candidate's process)."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        setter(mode, warn_only=warn_only)


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


def check_aliasing(inputs: list[Any], out: Any, previous: Any, label: str) -> None:
    """No output aliases an input or the previous call's output (a cached result)."""
    out_storages = storages(out)
    if out_storages & storages(inputs):
        raise CandidateFailure(f"{label}: an output aliases an input tensor")
    if previous is not None and out_storages & storages(previous):
        raise CandidateFailure(f"{label}: an output reuses an earlier call's output tensor (cached result)")


def check_unchanged(inputs: list[Any], regenerated: list[Any], label: str) -> None:
    """The candidate left its inputs as they were (compared with the same set made again)."""
    if not inputs_equal(inputs, regenerated):
        raise CandidateFailure(f"{label}: the candidate modified its inputs")
