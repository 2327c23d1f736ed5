"""What the candidate's process checks of its own harness after every call: every timer and
harness function by identity AND by content (issue 40: compiled code can replace a function's
`__code__` and keep its `id()`). A second layer only: the verdict's figures come from the
judge's clock (judgeclock.py) and its outputs from commitments, which no rewrite here can forge.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any


def _content(fn: Any) -> bytes:
    """The bytes of a Python function's code (its method's function's) and its defaults; empty
    for a builtin (whose code is not an object a rewrite can swap)."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return b""
    return _code_bytes(code) + repr(getattr(fn, "__defaults__", None)).encode()


def _code_bytes(code: Any) -> bytes:
    """A code object's instructions, names and constants, nested code included (not marshal:
    its output depends on reference counts, so it changes while the code does not)."""
    parts = [code.co_code, repr((code.co_names, code.co_varnames, code.co_freevars)).encode()]
    for const in code.co_consts:
        parts.append(_code_bytes(const) if hasattr(const, "co_code") else repr(const).encode())
    return b"\0".join(parts)


def harness_functions(torch: Any, server_cls: Any) -> list[Any]:
    from kcoder.evaluate.candidate import timedrange
    from kcoder.evaluate.harness import batchrun, timing, verify

    fns = [time.perf_counter, time.perf_counter_ns, time.time, time.monotonic, torch.cuda.synchronize,
           torch.cuda.Event.record, torch.cuda.Event.elapsed_time, torch.cuda.Event.synchronize,
           torch.Tensor.__eq__, torch.equal, torch.isnan, torch.Tensor.clone, torch.save, torch.Tensor.sum,
           torch.nn.Module.__call__, torch.utils.cpp_extension.load_inline]
    fns += [verify.check_aliasing, verify.check_unchanged, verify.inputs_equal, verify.guarded_call,
            timing.Clock.call, timedrange.profile_timed_range, timedrange.device_records,
            timedrange.work_outside_range, batchrun.checksum, batchrun.commit_into, batchrun.factor_table,
            batchrun.Factors.inputs, batchrun.BatchRun.queue, batchrun.BatchRun.finish, batchrun.serve_batch,
            batchrun.DeviceGate.hold]
    fns += [getattr(server_cls, name) for name in ("op_time", "op_batch", "op_save_batch", "op_verify",
                                                   "_integrity", "_save", "_call")]
    return fns


def harness_fingerprint(torch: Any, server_cls: Any) -> tuple[list[int], str]:
    """The identities of the harness's functions and a digest of their code."""
    fns = harness_functions(torch, server_cls)
    digest = hashlib.sha256()
    for fn in fns:
        digest.update(_content(fn))
    return [id(f) for f in fns], digest.hexdigest()
