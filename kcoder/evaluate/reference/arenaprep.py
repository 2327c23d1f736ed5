"""The reference process's side of an arena batch (harness/arena.py): every call's inputs written
before the clock starts, the output slots poisoned, and after the candidate's process was frozen,
the slots read: every float element written, drawn calls' outputs handed to the comparison.

Trusted: the candidate never runs here. The input arena is sealed (no process can write, shrink
or grow it after it was made), the output arena sealed against shrinking and growing (reading it
can never fault here), and what is compared is a copy of the slot's bytes made here.
"""

from __future__ import annotations

import fcntl
import os
from typing import Any

from kcoder.evaluate.harness.arena import ArenaError, aligned, as_bytes, dtype_name, map_fd, nbytes, view
from kcoder.evaluate.harness.batchrun import _perturbable

# A NaN whose payload no arithmetic produces (computed NaNs carry the quiet bit and no payload):
# an element still holding it after the call was never written.
POISON = {"float32": (0x7FA5A5A5, "int32"), "float64": (0x7FF5A5A5A5A5A5A5, "int64"),
          "float16": (0x7DA5, "int16"), "bfloat16": (0x7FA5, "int16")}
SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW")


def _memfd(name: str, size: int) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    return fd


def _seal(fd: int) -> None:
    seals = 0
    for name in SEALS:
        seals |= getattr(fcntl, name)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)


def poison_bits(dtype: str) -> tuple[int, str]:
    """The poison of a float dtype as the signed integer of its width (what a torch int view holds)."""
    value, as_int = POISON[dtype]
    width = 8 * nbytes(dtype, [1])
    return (value - (1 << width) if value >> (width - 1) else value), as_int


def output_tree(torch: Any, out: Any, cursor: list[int]) -> Any:
    """The reference output's structure with each tensor's offset in a slot."""
    if isinstance(out, (list, tuple)):
        return ["l" if isinstance(out, list) else "u", [output_tree(torch, o, cursor) for o in out]]
    if not isinstance(out, torch.Tensor):
        raise ArenaError(f"an output that is a {type(out).__name__}, not a tensor, cannot be timed in an arena")
    leaf = ["t", dtype_name(torch, out.dtype), list(out.shape), cursor[0]]
    cursor[0] += aligned(nbytes(leaf[1], leaf[2]))
    return leaf


def input_items(torch: Any, base: list[Any], capacity: int) -> tuple[list[dict[str, Any]], int]:
    """Where every input lies: a float tensor once per call (each call's own factors), any other
    tensor once for all calls, plain values in the layout itself; and the arena's size."""
    items, cursor = [], 0
    for x in base:
        if isinstance(x, torch.Tensor):
            size = aligned(nbytes(dtype_name(torch, x.dtype), list(x.shape)))
            per_call = _perturbable(torch, x)
            items.append({"t": [dtype_name(torch, x.dtype), list(x.shape), cursor, size if per_call else 0]})
            cursor += size * (capacity if per_call else 1)
        else:
            items.append({"v": x})
    return items, cursor


def _poison(torch: Any, tree: Any, slot: int) -> Any:
    """One slot's bytes with every float element poisoned (others zero)."""
    poison = torch.zeros(slot, dtype=torch.uint8)
    for _, dtype, shape, offset in leaves(tree):
        if dtype in POISON:
            bits, as_int = poison_bits(dtype)
            view(torch, poison, as_int, shape, offset).fill_(bits)
    return poison


def leaves(tree: Any) -> list[Any]:
    return [leaf for child in tree[1] for leaf in leaves(child)] if tree[0] in ("l", "u") else [tree]


class Arena:
    """Two memfds (inputs, output slots) for up to `capacity` calls, laid out for inputs shaped
    as `base` and outputs as `tree` (output_tree), kept across batches: an implementation's
    process maps them once, and every batch's inputs are written while it cannot run (frozen, or
    not started), so what it can read before the clock starts is only an earlier batch's."""

    def __init__(self, torch: Any, base: list[Any], capacity: int, tree: Any) -> None:
        self.torch, self.capacity, self.fds, self.maps = torch, capacity, [], []
        self.items, self.in_size = input_items(torch, base, capacity)
        try:
            self.fds.append(_memfd("kcoder-inputs", self.in_size))
            self.slot = aligned(max(max((leaf[3] + nbytes(leaf[1], leaf[2]) for leaf in leaves(tree)), default=0), 1))
            self.fds.append(_memfd("kcoder-outputs", self.slot * capacity))
            for fd in self.fds:  # neither can shrink under a process that maps it (no SIGBUS here)
                _seal(fd)
            # This process's own writable mappings: inputs written and slots read in place.
            self.maps = [map_fd(self.fds[0], self.in_size, writable=True),
                         map_fd(self.fds[1], self.slot * capacity, writable=True)]
        except BaseException:
            self.close()
            raise
        self.inputs, self.outputs = (as_bytes(torch, m) for m in self.maps)
        self.poison = _poison(torch, tree, self.slot)
        self.layout: dict[str, Any] = {"n": 0, "inputs": self.items, "in_size": self.in_size, "outputs": tree,
                                       "slot": self.slot, "out_size": self.slot * capacity}

    def fits(self, base: list[Any], n: int) -> bool:
        return n <= self.capacity and input_items(self.torch, base, self.capacity)[0] == self.items

    def load(self, factors: Any, base: list[Any], n: int) -> dict[str, Any]:
        """Batch inputs of `n` calls written (floats with each call's factors, made straight into
        the arena), their slots poisoned."""
        torch = self.torch
        for i in range(n):
            into = {j: view(torch, self.inputs, *item["t"][:2], item["t"][2] + i * item["t"][3])
                    for j, item in enumerate(self.items) if "t" in item}
            factors.buffers = {j: into[j] for j, x in enumerate(base) if j in into and _perturbable(torch, x)}
            call = factors.inputs(torch, base, i)
            for j, x in enumerate(call):
                if j in into and j not in factors.buffers and i == 0:  # a tensor every call shares
                    into[j].copy_(x)
            del call, into
        if n:
            self.outputs[: n * self.slot].view(n, self.slot).copy_(self.poison.expand(n, self.slot))
        self.layout["n"] = n
        return dict(self.layout)

    # --- after the candidate's process was stopped ----------------------------------------------
    def unwritten(self) -> list[int]:
        """Calls of the last batch with a float element of their output still poisoned (never written)."""
        torch, layout = self.torch, self.layout
        n, slot = int(layout["n"]), int(layout["slot"])
        found = torch.zeros(n, dtype=torch.bool)
        rows = self.outputs[: n * slot].view(n, slot)
        for _, dtype, shape, offset in leaves(layout["outputs"]):
            size = nbytes(dtype, shape)
            if dtype in POISON and size:
                bits, as_int = poison_bits(dtype)
                found |= (rows[:, offset:offset + size].view(getattr(torch, as_int)) == bits).any(dim=1)
        return [int(i) for i in found.nonzero().flatten()]

    def output(self, i: int) -> Any:
        """Call `i`'s output: tensors of this process's own (the slot's bytes copied here first)."""
        slot = int(self.layout["slot"])
        return _rebuild(self.torch, self.layout["outputs"], self.outputs[i * slot:(i + 1) * slot].clone())

    def close(self) -> None:
        self.inputs = self.outputs = None
        for m in self.maps:
            if m is not None:
                try:
                    m.close()
                except BufferError:  # a view still alive: unmapped when it goes
                    pass
        for fd in self.fds:
            os.close(fd)
        self.fds, self.maps = [], []


def _rebuild(torch: Any, tree: Any, flat: Any) -> Any:
    if tree[0] in ("l", "u"):
        items = [_rebuild(torch, child, flat) for child in tree[1]]
        return items if tree[0] == "l" else tuple(items)
    _, dtype, shape, offset = tree
    return view(torch, flat, dtype, shape, offset)
