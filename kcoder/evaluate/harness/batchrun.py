"""A batch of calls that the judge times with its own clock: the process's side, the same code for
every implementation (the candidate in its process, eager and torch.compile in the reference's).

The judge's side is judgeclock.py. A batch is one "batch" request, then the clock:
1. batch {seed, n, calibration}: the process makes input set `seed` (the base), and on the GPU
   queues the whole batch behind a wait on a gate page (shared memory the judge writes): the
   key's copy to the device, then per call the call's inputs (the base times dense factors drawn
   from the key, in the batch's own buffer), an L2 flush, the call, and the commitment of its outputs
   (a checksum of every byte, in stream order after the call). It replies "queued".
2. The judge writes the key and opens the gate (GPU), or sends it in a "go" (cpu): its clock
   starts. The process waits for the device (cpu: runs the calls) and replies "done" with every
   call's commitment: the judge's clock stops when that reply arrives.
Nothing can be computed before the clock starts (every call's inputs depend on the key, which
no process has before), nothing can be left for later (an output delivered afterwards must match
the commitment made before "done"), and which calls' outputs the judge checks is drawn after
"done". In the candidate's process this code is as untrusted as the rest: whatever a candidate
rewrites here, it cannot produce a right commitment without computing the output in time.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

# The factors lie in [1 - EPS, 1 + EPS): signs and zeros kept, every value changed, and by so
# much that a result precomputed from the base input set (known before the clock starts) leaves a
# correction as large as a quarter of the answer: computed in a cheaper precision it would miss
# the float32 tolerance by far (with 2**-7, a bf16 correction on an fp32 GEMM would have passed).
EPS = 0.25
PERIOD = 8191  # a prime: the factors of a contiguous input repeat with this period of its flat layout
M32 = 0xFFFFFFFF
HASH_MUL = 0x45D9F3B  # < 2**31: the products of 32-bit values stay within int64
GATE_BYTES = 4096  # one page: [0:4] the gate's generation (uint32), [8:16] the key (int64)
CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02


class GateError(RuntimeError):
    """The device could not be made to wait on the gate page."""


# --- inputs: the base input set times dense factors drawn from the key ---------------------------
def _hash32(torch: Any, x: Any) -> Any:
    """A 32-bit integer hash of int64 tensors holding values < 2**32 (identical on every device)."""
    x = ((x ^ (x >> 16)) * HASH_MUL) & M32
    x = ((x ^ (x >> 16)) * HASH_MUL) & M32
    return x ^ (x >> 16)


def factor_table(torch: Any, key: Any, n: int, size: int, salt: int, device: str) -> Any:
    """(n, size) float32 factors in [1 - EPS, 1 + EPS) for `n` calls along a dimension of `size`;
    `key` a 0-dim int64 tensor on `device` (on the GPU it arrives through the gate)."""
    calls = torch.arange(n, dtype=torch.int64, device=device).view(n, 1)
    index = torch.arange(size, dtype=torch.int64, device=device).view(1, size)
    x = (index + calls * 40503 + salt * 2654435 + key) & M32
    u = (_hash32(torch, x) >> 8).to(torch.float32) * 2.0**-24  # exact: 24 bits
    return 1.0 + EPS * (2.0 * u - 1.0)


class Factors:
    """Every call's factors, made in one go from the key (a few kernels, not a few per call).

    A contiguous input is scaled element by element in one pass: element j of its flat layout
    by the call's factor j mod PERIOD (PERIOD prime, so along rows and columns alike the pattern
    is no outer product a precomputed product could absorb: x@W or W@x of the base set helps
    nothing). Any other input (strided, or a last dimension that PERIOD divides, where the
    pattern would be per column only) is scaled along its first and last dimensions in two."""

    def __init__(self, torch: Any, key: Any, n: int, inputs: list[Any], device: str, reuse: bool = False) -> None:
        wanted = set()
        for x in inputs:
            if not _perturbable(torch, x):
                continue
            if _flat(x):
                wanted.add((min(PERIOD, x.numel()), 3))
            else:
                wanted |= {(_last(x), 1), (_first(x), 2)}
        self.tables = {(size, salt): factor_table(torch, key, n, size, salt, device) for size, salt in wanted}
        # reuse: one buffer per input for every call of a batch (the base is never written). A fresh
        # tensor per call costs its page faults on the cpu (an input of 64 MiB: 16 of the 26 ms its
        # scaling took), a harness cost as large as many kernels, taken off again with its noise.
        self.buffers: dict[int, Any] | None = {} if reuse else None

    def inputs(self, torch: Any, base: list[Any], i: int) -> list[Any]:
        """Call `i`'s inputs: floats scaled by the call's factors, into new tensors (or the batch's
        buffers); other values as they are."""
        out = []
        for j, x in enumerate(base):
            if not _perturbable(torch, x):
                out.append(x)
                continue
            y = self._buffer(torch, j, x)
            if _flat(x):
                _scale_flat(torch, x, y, self.tables[(min(PERIOD, x.numel()), 3)][i].to(x.dtype))
            else:
                last = self.tables[(_last(x), 1)][i].to(x.dtype)
                torch.mul(x, last if x.dim() else last[0], out=y)
                if x.dim() >= 2:
                    y.mul_(self.tables[(_first(x), 2)][i].to(x.dtype).view(-1, *[1] * (x.dim() - 1)))
            out.append(y)
        return out

    def _buffer(self, torch: Any, j: int, x: Any) -> Any:
        if self.buffers is None:
            return torch.empty_like(x)
        if j not in self.buffers:
            self.buffers[j] = torch.empty_like(x)
        return self.buffers[j]

def _scale_flat(torch: Any, x: Any, y: Any, table: Any) -> None:
    """y = x times table[j mod PERIOD] at flat index j: one read of x, one write of y."""
    flat, into = x.view(-1), y.view(-1)
    rows = flat.numel() // table.numel()
    whole = rows * table.numel()
    if rows:
        torch.mul(flat[:whole].view(rows, -1), table, out=into[:whole].view(rows, -1))
    if whole < flat.numel():
        torch.mul(flat[whole:], table[: flat.numel() - whole], out=into[whole:])


def _flat(x: Any) -> bool:
    """Scaled element by element (Factors): contiguous, and its rows do not repeat the period."""
    return x.dim() >= 1 and x.is_contiguous() and (x.numel() <= PERIOD or _last(x) % PERIOD != 0)


def _perturbable(torch: Any, x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0


def _first(x: Any) -> int:
    return int(x.shape[0]) if x.dim() else 1


def _last(x: Any) -> int:
    return int(x.shape[-1]) if x.dim() else 1


def perturbed(torch: Any, base: list[Any], key: int, n: int, i: int, device: str) -> list[Any]:
    """The inputs call `i` of an `n`-call batch under `key` saw (the reference's replay)."""
    k = torch.tensor(key & M32, dtype=torch.int64, device=device)
    return Factors(torch, k, n, base, device).inputs(torch, base, i)


# --- commitments: a checksum of every byte of an output -----------------------------------------
def leaves(torch: Any, out: Any) -> list[Any]:
    """The output's tensors, in order (numbers and None carry no bytes to commit)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in leaves(torch, o)]
    return []


def checksum(torch: Any, t: Any) -> Any:
    """A 0-dim int64 tensor: the wrapping sum of the tensor's bytes read as 32-bit words (bytes
    where they do not divide), over its logical (contiguous) layout. Integer sums do not depend
    on the order of summation: every device and every process gets the same value."""
    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
    if flat.numel() % 4 == 0:
        # Summed in int32, wrapping: the same value modulo 2**32 in any order, and 15x faster on
        # the cpu than widening every word to int64 (49 ms against 3 ms for 64 MiB; a commitment
        # is harness cost in every batch).
        return flat.view(torch.int32).sum(dtype=torch.int32)
    return flat.sum(dtype=torch.int64)


def commit_into(torch: Any, out: Any, row: Any) -> None:
    """Write the checksums of `out`'s tensors into `row` (int64, one slot per tensor), in stream order."""
    for k, t in enumerate(leaves(torch, out)[: row.numel()]):
        row[k] = checksum(torch, t)


def commitments(torch: Any, out: Any) -> list[int]:
    """The checksums of an output as numbers (the reference's side of a commitment)."""
    return [int(checksum(torch, t).item()) for t in leaves(torch, out)]


# --- the gate: the device waits until the judge writes the page ------------------------------------
def _driver() -> Any:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise GateError(f"no CUDA driver library ({exc})") from None


class DeviceGate:
    """The gate page mapped in this process and registered with the device, so that a stream can
    wait on it (cuStreamWaitValue32) and copy the key from it when the judge opens it."""

    def __init__(self, torch: Any, fd: int) -> None:
        self.torch = torch
        self.map = mmap.mmap(fd, GATE_BYTES)
        self.host = torch.frombuffer(self.map, dtype=torch.int64, count=GATE_BYTES // 8)
        self.driver = _driver()
        ptr = ctypes.c_void_p(self.host.data_ptr())
        rc = torch.cuda.cudart().cudaHostRegister(self.host.data_ptr(), GATE_BYTES, CU_MEMHOSTREGISTER_DEVICEMAP)
        if int(rc) != 0:
            raise GateError(f"cudaHostRegister of the gate page failed ({int(rc)})")
        self.dptr = ctypes.c_uint64(0)
        get = getattr(self.driver, "cuMemHostGetDevicePointer_v2", None) or self.driver.cuMemHostGetDevicePointer
        if get(ctypes.byref(self.dptr), ptr, ctypes.c_uint(0)) != 0:
            raise GateError("cuMemHostGetDevicePointer of the gate page failed")
        wait = getattr(self.driver, "cuStreamWaitValue32_v2", None) or getattr(self.driver, "cuStreamWaitValue32", None)
        if wait is None:
            raise GateError("the driver has no cuStreamWaitValue32")
        wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self.wait = wait
        self.copy = getattr(self.driver, "cuMemcpyHtoDAsync_v2", None) or self.driver.cuMemcpyHtoDAsync
        self.copy.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self.key = torch.zeros((), dtype=torch.int64, device="cuda")
        self.warm: set[str] = set()  # what has run its batch's path once (serve_batch)
        (self.key & M32).sum()  # the kernels hold() itself launches, loaded now
        torch.cuda.synchronize()

    def hold(self, generation: int) -> Any:
        """Queue, on the current stream, a wait until the page's generation reaches `generation`,
        then the key's copy to the device; returns the device key (0-dim int64)."""
        stream = self.torch.cuda.current_stream().cuda_stream
        rc = self.wait(ctypes.c_void_p(stream), self.dptr, ctypes.c_uint32(generation), CU_STREAM_WAIT_VALUE_GEQ)
        if rc != 0:
            raise GateError(f"cuStreamWaitValue32 failed ({rc})")
        # The driver's own asynchronous copy: it reads the page when it runs, behind the wait
        # (torch's copy_ of memory it did not allocate waits for the stream: a deadlock here).
        rc = self.copy(ctypes.c_uint64(self.key.data_ptr()), ctypes.c_void_p(self.host.data_ptr() + 8),
                       ctypes.c_size_t(8), ctypes.c_void_p(stream))
        if rc != 0:
            raise GateError(f"cuMemcpyHtoDAsync of the key failed ({rc})")
        return self.key & M32


# --- one batch ------------------------------------------------------------------------------------
class BatchRun:
    """One batch in this process: queued (GPU) or run on "go" (cpu), outputs kept for the judge."""

    def __init__(self, torch: Any, device: str, model: Any, base: list[Any], n: int, keep: bool,
                 flush: Any = None) -> None:
        self.torch, self.device, self.model, self.base, self.n = torch, device, model, base, n
        self.keep, self.flush = keep, flush
        self.outputs: list[Any] = []
        self.slots = 0
        self.sums: Any = None

    def queue(self, key: Any) -> None:
        """Every call, in stream order, on inputs made from `key` (a 0-dim int64 device tensor on
        the GPU, behind the gate; on the cpu the key itself, after "go")."""
        torch = self.torch
        factors = Factors(torch, key, self.n, self.base, self.device, reuse=True)
        for i in range(self.n):
            inputs = factors.inputs(torch, self.base, i)
            if self.flush is not None:  # after the inputs are written: the call starts with a cold, clean L2
                self.flush()
            with torch.no_grad():
                out = self.model(*inputs)
            del inputs
            if self.sums is None:
                self.slots = max(1, len(leaves(torch, out)))
                self.sums = torch.zeros(self.n, self.slots, dtype=torch.int64, device=self.device)
            commit_into(torch, out, self.sums[i])
            if self.keep:
                self.outputs.append(out)
            del out

    def finish(self) -> list[list[int]]:
        """Wait for the device; every call's commitment (the judge's clock stops on the reply)."""
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return self.sums.tolist() if self.sums is not None else [[] for _ in range(self.n)]


def warm_kernels(run: BatchRun) -> None:
    """One call of the batch's path, ungated: with CUDA's lazy module loading, the first launch of
    a kernel loads its module, which waits for the device, and a device held by the gate would
    never come (a deadlock seen on an H100, torch 2.11)."""
    torch = run.torch
    dry = BatchRun(torch, run.device, run.model, run.base, 1, keep=False, flush=run.flush)
    dry.queue(torch.zeros((), dtype=torch.int64, device=run.device))
    dry.finish()


def cpu_key(torch: Any, key: int) -> Any:
    return torch.tensor(key & M32, dtype=torch.int64)


def calibration_template(torch: Any, out: Any) -> Any:
    """Tensors of the harness's own, shaped as an implementation's output `out` (only its shapes,
    dtypes and devices are read): what the calibration returns must cost what a plain output
    costs to commit, whatever the candidate's own tensors would cost to read."""
    if isinstance(out, torch.Tensor):
        return torch.zeros(tuple(out.shape), dtype=out.dtype, device=out.device)
    if isinstance(out, (list, tuple)):
        return [calibration_template(torch, o) for o in out]
    return None


def calibration_module(torch: Any, template: Any) -> Any:
    """What stands in for an implementation in a calibration batch: a module that computes
    nothing and returns `template` (calibration_template), so that the batch's own costs
    (inputs, flush, commitments, messages) are measured and taken off."""

    class Calibration(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return template

    return Calibration()


def serve_batch(link: Any, run: BatchRun, gate: DeviceGate | None, generation: int,
                guard: Any = None, kind: str = "") -> list[list[int]]:
    """The process's side of one batch (see the module's docstring): queue it behind the gate
    (GPU) or wait for "go" (cpu), run it, return every call's commitment. `guard(fn)` runs the
    implementation's part (the candidate's exceptions become its failure there); `kind` names
    what runs (an implementation, or its calibration) for the first batch's warm-up."""
    guard = guard or (lambda fn: fn())
    if run.device == "cuda":
        if gate is None:
            raise GateError("no gate page was handed over")
        if kind not in gate.warm:  # every kernel of the batch loaded before any waits on the gate
            guard(lambda: warm_kernels(run))
            gate.warm.add(kind)
        key = gate.hold(generation)
        guard(lambda: run.queue(key))
        link.reply(queued=True)
    else:
        link.reply(queued=True)
        go = link.receive()
        if not isinstance(go, dict) or go.get("op") != "go":
            raise GateError("the judge's go did not come")
        guard(lambda: run.queue(cpu_key(run.torch, int(go.get("key", 0)))))
    return run.finish()


def open_gate(torch: Any, sock: Any) -> DeviceGate:
    """The gate page whose descriptor the judge sent over `sock` (the hand-off socket)."""
    import os

    from kcoder.evaluate.harness.handoff import receive_fd

    if sock is None:
        raise GateError("no socket to receive the gate page on")
    fd = receive_fd(sock)
    try:
        return DeviceGate(torch, fd)
    finally:
        os.close(fd)
