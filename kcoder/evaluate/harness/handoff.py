"""Outputs from the candidate's process to the reference process by file descriptor, not file.

The candidate's process (outbox.py) copies its output's tensors into one buffer it can share (a
memfd on the CPU; on the GPU a CUDA allocation exported as a POSIX file descriptor, cudashare.py),
sends the descriptor over a Unix socket to the judge, and names the layout (structure, dtypes,
shapes, offsets) in its JSON reply. The judge checks the layout (`validate`: a malformed one is
tampering), passes the descriptor on to the reference process with the request to check it, and
keeps nothing. The reference process checks the layout again, copies the bytes into memory of its
own before anything else (the candidate's process could change a shared buffer afterwards) and
compares that copy. Legacy CUDA IPC handles do not open across the sandbox's PID namespace; a
file descriptor passed over a socket does. Outputs that cannot travel this way (a CPU tensor from
a cuda candidate, a sparse one, an unusual dtype) still go through a file.

This module is torch-free where the judge uses it (`validate`, the socket helpers).
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
from dataclasses import dataclass
from typing import Any

ALIGN = 256  # every tensor's offset in the shared buffer (enough for any dtype, and coalesced copies)
MAX_DEPTH = 8
MAX_NODES = 4096
MAX_DIMS = 16
MAX_EXTENT = 2**40
WAIT_S = 30.0  # the descriptor is sent before the reply that names it: it is there at once
# bytes per element of every dtype an output may travel in (others go through a file)
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "complex64": 8, "complex128": 16,
            "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
            "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


class HandoffError(Exception):
    """A layout or descriptor that does not hold what it claims; the message says what."""


@dataclass
class Leaf:
    """One tensor of a validated layout: its bytes at `offset` in the shared buffer."""

    dtype: str
    shape: list[int]
    offset: int

    @property
    def nbytes(self) -> int:
        n = ITEMSIZE[self.dtype]
        for d in self.shape:
            n *= d
        return n


# --- the layout (JSON: judge and reference validate it, torch-free) ------------------------------
def validate(layout: Any, max_bytes: int) -> list[Leaf]:
    """The tensors a layout names, after checking every field: {"size": bytes, "tree": node}
    with node ["t", dtype, shape, offset] | ["l", [node...]] (list) | ["u", [node...]] (tuple) |
    ["v", int|float|bool|None]; every tensor inside the buffer, aligned, the buffer at most
    `max_bytes`. Raises HandoffError."""
    if not isinstance(layout, dict) or set(layout) != {"size", "tree"}:
        raise HandoffError("the layout is not {size, tree}")
    size = layout["size"]
    if not _is_int(size) or not 0 < size <= max_bytes:
        raise HandoffError(f"a buffer size of {str(size)[:40]} bytes (at most {max_bytes} allowed)")
    leaves: list[Leaf] = []
    _walk(layout["tree"], 0, leaves, [0])
    if not leaves:
        raise HandoffError("a layout without tensors")
    for leaf in leaves:
        if leaf.offset + leaf.nbytes > size:
            raise HandoffError(f"a tensor at bytes {leaf.offset}..{leaf.offset + leaf.nbytes} of a {size}-byte buffer")
    return leaves


def _walk(node: Any, depth: int, leaves: list[Leaf], count: list[int]) -> None:
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise HandoffError(f"a layout deeper than {MAX_DEPTH} or larger than {MAX_NODES} nodes")
    if not isinstance(node, list) or not node or node[0] not in ("t", "l", "u", "v"):
        raise HandoffError("a layout node that is not [t|l|u|v, ...]")
    kind = node[0]
    if kind == "t":
        if len(node) != 4:
            raise HandoffError("a tensor node that is not [t, dtype, shape, offset]")
        _, dtype, shape, offset = node
        if dtype not in ITEMSIZE:
            raise HandoffError(f"an unknown dtype {str(dtype)[:30]!r}")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(_is_int(d) and 0 <= d <= MAX_EXTENT for d in shape)):
            raise HandoffError(f"a shape that is not a list of at most {MAX_DIMS} sizes")
        if not _is_int(offset) or offset < 0 or offset % ALIGN:
            raise HandoffError(f"an offset that is not a multiple of {ALIGN} bytes")
        leaves.append(Leaf(dtype, list(shape), offset))
    elif kind == "v":
        if len(node) != 2 or not (node[1] is None or isinstance(node[1], (bool, int, float))):
            raise HandoffError("a value node that is not [v, number|bool|null]")
    else:
        if len(node) != 2 or not isinstance(node[1], list):
            raise HandoffError("a sequence node that is not [l|u, [...]]")
        for child in node[1]:
            _walk(child, depth + 1, leaves, count)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def bytes_bound(reference_bytes: int, granularity: int = 2**21) -> int:
    """The largest buffer the reference process maps for an output whose reference is
    `reference_bytes`: room for a wrong shape to be reported as one, nothing absurd."""
    return 2 * reference_bytes + MAX_NODES * ALIGN + granularity


# --- descriptors over a Unix socket -------------------------------------------------------------
def send_fd(sock: socket.socket, fd: int) -> None:
    """Send one file descriptor (with one byte of data)."""
    socket.send_fds(sock, [b"h"], [fd])


def receive_fd(sock: socket.socket, wait_s: float = WAIT_S) -> int:
    """The one descriptor the peer sent with its latest message. Raises HandoffError when none
    came within `wait_s`, or the message carried none or several (those are closed)."""
    ready, _, _ = select.select([sock], [], [], wait_s)
    if not ready:
        raise HandoffError(f"no output descriptor arrived within {wait_s:g} s")
    try:
        data, fds, flags, _ = socket.recv_fds(sock, 16, 4)
    except OSError as exc:
        raise HandoffError(f"the output descriptor could not be received ({exc})") from None
    if len(fds) != 1 or not data or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise HandoffError(f"a message with {len(fds)} descriptors where one was expected")
    return fds[0]


def drain(sock: socket.socket, limit: int = 64) -> int:
    """Close whatever descriptors wait unread on `sock` (a peer that sent more than it was asked
    for); returns how many messages there were (at most `limit`: a peer that keeps sending
    cannot keep the judge here)."""
    n = 0
    while n < limit and select.select([sock], [], [], 0)[0]:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 16, 4)
        except OSError:
            return n
        for fd in fds:
            os.close(fd)
        if not data:
            return n
        n += 1
    return n


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the judge's end, the child's end); the child's end is inheritable (spawn passes it on)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one message, one descriptor
    theirs.set_inheritable(True)
    return mine, theirs



# --- the reference process's end (torch imported lazily: the judge never needs it) ----------------
def rebuild(tree: Any, buffer: Any) -> Any:
    """The output a validated layout describes, its tensors views of `buffer` (flat uint8, the
    reference process's own copy of the shared bytes)."""
    import torch

    kind = tree[0]
    if kind == "v":
        return tree[1]
    if kind in ("l", "u"):
        items = [rebuild(child, buffer) for child in tree[1]]
        return items if kind == "l" else tuple(items)
    _, dtype, shape, offset = tree
    leaf = Leaf(dtype, shape, offset)
    return buffer[offset:offset + leaf.nbytes].view(getattr(torch, dtype)).view(shape)


def receive_output(sock: socket.socket, layout: Any, reference_bytes: int, device: str) -> Any:
    """The reference process's end: the candidate's output as tensors in this process's own
    memory (copied before anything reads them). Raises HandoffError for a layout or a descriptor
    that does not hold what it claims."""
    fd = receive_fd(sock)
    try:
        leaves = validate(layout, bytes_bound(reference_bytes))
        size = max(leaf.offset + leaf.nbytes for leaf in leaves)
        if size == 0:  # every tensor empty: no bytes to read
            import torch

            buffer = torch.empty(0, dtype=torch.uint8, device=device)
        elif device == "cuda":
            from kcoder.evaluate.harness.cudashare import import_copy

            try:
                buffer = import_copy(fd, size)
            except RuntimeError as exc:
                raise HandoffError(str(exc)) from None
        else:
            buffer = _import_host(fd, size)
    finally:
        os.close(fd)
    return rebuild(layout["tree"], buffer)


def _import_host(fd: int, size: int) -> Any:
    """`size` bytes read from the descriptor into a tensor of this process's own. Read, never
    mapped: the candidate's process could shrink a mapped memfd under this process (SIGBUS)."""
    import torch

    buffer = torch.empty(size, dtype=torch.uint8)
    view, done = host_view(buffer), 0
    while done < size:
        try:
            n = os.preadv(fd, [view[done:]], done)
        except OSError as exc:
            raise HandoffError(f"the shared output could not be read ({exc.strerror})") from None
        if n <= 0:
            raise HandoffError(f"the shared output holds {done} bytes, its layout names {size}")
        done += n
    return buffer


def host_view(flat: Any) -> memoryview:
    """A memoryview of a contiguous CPU uint8 tensor's bytes (no copy, no numpy)."""
    return memoryview((ctypes.c_ubyte * flat.numel()).from_address(flat.data_ptr())).cast("B")
