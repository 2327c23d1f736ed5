"""The candidate process's end of the outputs' trip to the reference process (handoff.py): the
output checked to be plain data, its tensors copied into one shareable buffer (a memfd on the
CPU, an exported CUDA allocation on the GPU: cudashare.py) whose descriptor goes to the judge
over the Unix socket, its layout in the JSON reply; through a file where it cannot go that way.
kcoder's code in the candidate's process: nothing here is trusted by the judge or the reference.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

from kcoder.evaluate.harness.handoff import ALIGN, ITEMSIZE, MAX_DEPTH, MAX_DIMS, host_view, send_fd


def describe(out: Any, device: str) -> tuple[dict[str, Any], list[tuple[Any, int]]] | None:
    """The layout of an output and its tensors' bytes as (flat uint8 tensor, offset) pairs, or
    None when the output cannot travel by descriptor (a tensor on another device, not strided,
    of another dtype; a value that is not a number; nothing to share)."""
    parts: list[tuple[Any, int]] = []
    size = [0]
    tree = _describe(out, device, parts, size, 0)
    if tree is None or not parts or size[0] == 0:
        return None
    return {"size": size[0], "tree": tree}, parts


def _describe(out: Any, device: str, parts: list[tuple[Any, int]], size: list[int], depth: int) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        dtype = str(out.dtype).replace("torch.", "")
        if (type(out) is not torch.Tensor or out.layout != torch.strided or out.device.type != device
                or dtype not in ITEMSIZE or out.dim() > MAX_DIMS):
            return None
        flat = out.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
        offset = size[0]
        size[0] += -(-flat.numel() // ALIGN) * ALIGN
        if flat.numel():
            parts.append((flat, offset))
        return ["t", dtype, list(out.shape), offset]
    if type(out) in (list, tuple) and depth < MAX_DEPTH:
        children = [_describe(o, device, parts, size, depth + 1) for o in out]
        return None if any(c is None for c in children) else ["l" if type(out) is list else "u", children]
    if out is None or type(out) in (bool, int, float):
        return ["v", out]
    return None


class NotPlain(Exception):
    """The output is not made of plain tensors, lists, tuples and numbers (the candidate's fault)."""


class UnreadableOutput(NotPlain):
    """The output's own memory could not be read (protected, unmapped): the candidate's fault."""


class Outbox:
    """The candidate process's end: each output to the reference process by descriptor, or
    through a file where it cannot travel that way."""

    def __init__(self, fd: int | None, device: str) -> None:
        self.sock = socket.socket(fileno=fd) if fd is not None else None
        self.device = device
        self.broken = "" if fd is not None else "no socket"  # why sharing failed (files from then on)
        self.cuda_buffer: Any = None

    def deliver(self, out: Any, path: str) -> dict[str, Any]:
        """The reply that hands `out` over: {"saved", "shared": layout} when it went by descriptor,
        {"saved", "unshared": why} when it was saved at `path`. Raises NotPlain."""
        out = plain_output(out)
        layout = self.send(out)
        if layout is not None:
            return {"saved": True, "shared": layout}
        _save_file(out, path, self.device)
        return {"saved": True, "unshared": self.broken or "its type, device or dtype cannot be shared"}

    def send(self, out: Any) -> dict[str, Any] | None:
        """Share `out` and send its descriptor; returns the layout for the judge, or None when
        the output must go through a file."""
        described = None if self.broken else describe(out, self.device)
        if described is None:
            return None
        layout, parts = described
        try:
            fd = self._export(parts, layout["size"])
        except UnreadableOutput:
            raise
        except (OSError, RuntimeError) as exc:  # the driver cannot share memory here: files from now on
            self.broken = str(exc)[:200]
            return None
        try:
            send_fd(self.sock, fd)  # type: ignore[arg-type]
        finally:
            os.close(fd)
        return layout

    def _export(self, parts: list[tuple[Any, int]], size: int) -> int:
        if self.device == "cuda":
            from kcoder.evaluate.harness.cudashare import DeviceBuffer

            # exactly the size the reader maps: the driver maps an imported allocation only whole
            # (a smaller output after a bigger one failed with CUDA_ERROR_NOT_SUPPORTED)
            if self.cuda_buffer is None or not self.cuda_buffer.holds_exactly(size):
                self.cuda_buffer = None  # the old one is released first: one buffer alive at a time
                self.cuda_buffer = DeviceBuffer(size)
            return self.cuda_buffer.export(parts)
        return _export_host(parts, size)

    def shared_bytes(self) -> int:
        """Device memory held for sharing, outside torch's allocator (the peak counts it)."""
        return self.cuda_buffer.size if self.cuda_buffer is not None else 0


def plain_output(out: Any) -> Any:
    """Outputs as plain tensors/lists/scalars that the reference's loaders accept; the exact
    type is checked here (a subclass would not survive the trip)."""
    import torch

    if isinstance(out, torch.Tensor):
        if type(out) is not torch.Tensor:
            raise NotPlain(f"output is a {type(out).__name__}, not a plain torch.Tensor")
        return out.detach()
    if isinstance(out, (list, tuple)):
        return type(out)(plain_output(o) for o in out) if type(out) in (list, tuple) else [plain_output(o) for o in out]
    return out


def _save_file(out: Any, path: str, device: str) -> None:
    import torch
    from torch.utils.serialization import config

    # Pinned staging for device-to-host copies; no CRC (it protects nothing against a writer
    # who controls the file, and costs a pass over every byte).
    config.save.use_pinned_memory_for_d2h = device == "cuda"
    config.save.compute_crc32 = False
    torch.save(out, path)


def _export_host(parts: list[tuple[Any, int]], size: int) -> int:
    """A memfd holding the parts at their offsets, written by the kernel straight from the
    tensors' memory (no mapping: no page faults, no extra pass)."""
    fd = os.memfd_create("kcoder-output", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        for flat, offset in parts:
            view, done = host_view(flat), 0
            while done < len(view):
                try:
                    done += os.pwritev(fd, [view[done:]], offset + done)
                except OSError as exc:
                    if exc.errno == errno.EFAULT:  # the kernel could not read the tensor's pages
                        raise UnreadableOutput("the output's memory could not be read (protected or "
                                               "unmapped pages)") from None
                    raise
    except BaseException:
        os.close(fd)
        raise
    return fd
