"""A batch whose inputs and outputs live in memory the trusted side owns (issue 45; the cpu target).

The reference process (trusted) writes every call's inputs of a batch into one sealed memfd
before the clock starts and makes a second memfd of output slots, every float element poisoned
(reference/arenaprep.py). The judge hands both descriptors to the implementation's process with
the message that starts its clock; only then can that process see the inputs, so nothing can be
computed ahead. The process maps them, calls the implementation on each call's inputs (views of
the sealed mapping: read-only) and copies each output into its slot, then says "done". The judge
stops its clock on that reply and freezes the candidate's processes before the reference process
reads the slots: whatever the candidate's process rewrites of this module (it is as untrusted as
the rest of that process), what counts is which bytes are in the slots when it was stopped.

This module is the implementation process's side (the candidate's, and the reference's own for
eager, torch.compile and the calibration: the same code, each process its own copy), plus the
layout both sides read. It imports torch lazily; the judge uses none of it.
"""

from __future__ import annotations

import mmap
import os
import warnings
from typing import Any

ALIGN = 256  # every tensor's offset in an arena (coalesced copies, any dtype's alignment)
MAX_NODES = 4096
# Bytes per element of the dtypes an arena holds (others: the batch cannot be laid out).
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "complex64": 8, "complex128": 16,
            "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}


class ArenaError(Exception):
    """A layout or a mapping that does not hold what it claims (kcoder's side of a batch)."""


class OutputMismatch(Exception):
    """The implementation's output does not fit the slot the reference's output fills."""


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def nbytes(dtype: str, shape: list[int]) -> int:
    n = ITEMSIZE[dtype]
    for d in shape:
        n *= d
    return n


def dtype_name(torch: Any, dtype: Any) -> str:
    name = str(dtype).replace("torch.", "")
    if name not in ITEMSIZE:
        raise ArenaError(f"a tensor of dtype {name} cannot be laid out in an arena")
    return name


# --- the process's side -------------------------------------------------------------------------
def map_fd(fd: int, size: int, writable: bool) -> mmap.mmap | None:
    """The arena mapped whole, its pages faulted in at once (one system call, not one fault per
    page inside the calls); None for an empty arena."""
    if size == 0:
        return None
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, size, flags=flags, prot=prot)


def as_bytes(torch: Any, mapped: mmap.mmap | None) -> Any:
    """A flat uint8 tensor over a mapping (a read-only one too: its views are never written)."""
    if mapped is None:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the given buffer is not writable": by design for inputs
        return torch.frombuffer(mapped, dtype=torch.uint8)


def view(torch: Any, flat: Any, dtype: str, shape: list[int], offset: int) -> Any:
    size = nbytes(dtype, shape)
    if offset < 0 or offset + size > flat.numel():
        raise ArenaError(f"a tensor at {offset}+{size} lies outside the arena's {flat.numel()} bytes")
    return flat[offset:offset + size].view(getattr(torch, dtype)).view(shape)


def own_storage(torch: Any, mapped: mmap.mmap, dtype: str, shape: list[int], offset: int) -> Any:
    """A tensor over `mapped`'s bytes at `offset` with a storage of its own (storage offset 0, no
    other input sharing it), as a tensor a user's code makes: torch.compile specialises on neither
    (views of one shared buffer recompiled it for aliased inputs and symbolic storage offsets, and
    its calls on them ran ~2x slower than on plain tensors)."""
    size = nbytes(dtype, shape)
    if offset < 0 or offset + size > len(mapped):
        raise ArenaError(f"a tensor at {offset}+{size} lies outside the arena's {len(mapped)} bytes")
    if size == 0:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the given buffer is not writable": by design for inputs
        flat = torch.frombuffer(mapped, dtype=getattr(torch, dtype), count=size // ITEMSIZE[dtype], offset=offset)
    return flat.view(shape)


def call_inputs(torch: Any, mapped: mmap.mmap, layout: dict[str, Any], i: int) -> list[Any]:
    """Call `i`'s inputs: tensors over the input arena, and the plain values the layout carries."""
    out = []
    for item in layout["inputs"]:
        if "v" in item:
            out.append(item["v"])
        else:
            dtype, shape, offset, stride = item["t"]
            out.append(own_storage(torch, mapped, dtype, shape, offset + i * stride))
    return out


def store(torch: Any, out: Any, tree: Any, flat: Any, base: int, where: str = "output") -> None:
    """Copy an output into its slot (`tree`: the reference output's structure, offsets from `base`)."""
    kind = tree[0]
    if kind in ("l", "u"):
        if not isinstance(out, (list, tuple)) or len(out) != len(tree[1]):
            raise OutputMismatch(f"{where} is a {type(out).__name__}, the reference's a sequence of {len(tree[1])}")
        for k, (item, child) in enumerate(zip(out, tree[1], strict=True)):
            store(torch, item, child, flat, base, f"{where}[{k}]")
        return
    _, dtype, shape, offset = tree
    if not isinstance(out, torch.Tensor):
        raise OutputMismatch(f"{where} is a {type(out).__name__}, the reference's a tensor")
    if list(out.shape) != list(shape) or str(out.dtype).replace("torch.", "") != dtype:
        raise OutputMismatch(f"{where} has shape {list(out.shape)} and {out.dtype}, the reference's {shape} "
                             f"and torch.{dtype}")
    if out.device.type != "cpu":
        raise OutputMismatch(f"{where} is on {out.device}, the reference's on the cpu")
    view(torch, flat, dtype, shape, base + offset).copy_(out)


def serve(torch: Any, mapped: MappedArena | None, layout: dict[str, Any], sock: Any, model: Any,
          call: Any) -> MappedArena:
    """A process's side of one arena batch: the arena mapped anew when the batch brings one
    (its descriptors wait on `sock`), then run. Returns the mapping to keep."""
    if layout.get("fresh") or mapped is None:
        if mapped is not None:
            mapped.close()
        mapped = MappedArena(torch, layout, *receive_arena(sock))
    mapped.run(model, call, layout)
    return mapped


def receive_arena(sock: Any) -> tuple[int, int]:
    """The two descriptors (inputs, outputs) sent ahead of the message that names them."""
    from kcoder.evaluate.harness.handoff import HandoffError, receive_fd

    try:
        return receive_fd(sock), receive_fd(sock)
    except HandoffError as exc:
        raise ArenaError(str(exc)) from None


class MappedArena:
    """An arena as an implementation's process maps it: once, for every batch until the judge
    hands over a new one (a batch's layout says "fresh" when its descriptors come with it)."""

    def __init__(self, torch: Any, layout: dict[str, Any], in_fd: int, out_fd: int) -> None:
        try:
            self.maps = [map_fd(in_fd, int(layout["in_size"]), writable=False),
                         map_fd(out_fd, int(layout["out_size"]), writable=True)]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ArenaError(f"the arena could not be mapped ({exc})") from None
        finally:
            os.close(in_fd)
            os.close(out_fd)
        self.torch, self.layout = torch, layout
        self.outputs = as_bytes(torch, self.maps[1])

    def run(self, model: Any, call: Any, layout: dict[str, Any]) -> None:
        """Every call of the batch `layout` names, its output copied into its slot. `call(fn)` runs
        the implementation's part (its exceptions become its failure there)."""
        torch = self.torch
        if int(layout["n"]) * int(layout["slot"]) > self.outputs.numel():
            raise ArenaError("a batch larger than the arena mapped")
        with torch.no_grad():
            for i in range(int(layout["n"])):
                inputs = call_inputs(torch, self.maps[0], layout, i)
                out = call(lambda x=inputs: model(*x))
                call(lambda o=out, k=i: store(torch, o, layout["outputs"], self.outputs, k * int(layout["slot"])))
                del out, inputs

    def close(self) -> None:
        """Unmapped where nothing holds a view any more (else when the last view goes)."""
        self.outputs = None
        for m in self.maps:
            if m is not None:
                try:
                    m.close()
                except BufferError:
                    pass
