"""One-line reasons for a candidate process that died, hung or broke the protocol."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from kcoder.evaluate.harness.channel import ChannelError
from kcoder.evaluate.options import EvalOptions

_SIGNALS = {
    signal.SIGSEGV: "segmentation fault (SIGSEGV)",
    signal.SIGABRT: "abort (SIGABRT)",
    signal.SIGBUS: "bus error (SIGBUS)",
    signal.SIGFPE: "floating-point exception (SIGFPE)",
    signal.SIGILL: "illegal instruction (SIGILL)",
    signal.SIGKILL: "killed (SIGKILL, often out of memory)",
}
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')
_PHASE_WORDS = {"import": "importing the candidate (Python code outside load_inline)",
                "compile": "compiling (load_inline)", "init": "ModelNew(*get_init_inputs())"}


def crash_reason(exc: ChannelError, phase: str, returncode: int | None, options: EvalOptions, output: str) -> str:
    """Why the candidate's process gave no valid reply, as one line."""
    what = _PHASE_WORDS.get(phase, f"the {phase} stage")
    if exc.kind == "timeout":
        limit = _limit(phase, options)
        return f"timeout: {what} exceeded its {limit:.0f} s limit; the candidate's process was killed (hang?)"
    if exc.kind == "memory":
        return str(exc)
    if exc.kind == "tampered":
        return f"tampering: the candidate's process sent {exc} during {phase}"
    where = _crash_location(output)
    # Killed by a signal: negative when the worker is our child, 128+N when bwrap relays it.
    sig = -returncode if returncode is not None and returncode < 0 else None
    if returncode is not None and 128 < returncode < 128 + 65:
        sig = returncode - 128
    if sig:
        return f"crash during {phase}: {_SIGNALS.get(sig) or _signal_name(sig)}{where}"
    return f"the candidate's process exited (code {returncode}) during {phase}{where} without finishing"


def _limit(phase: str, options: EvalOptions) -> float:
    return {"import": options.import_timeout_s, "compile": options.build_timeout_s,
            "init": options.init_timeout_s, "build": options.import_timeout_s,
            "verify": options.verify_timeout_s}.get(phase, options.timing_timeout_s)


def _signal_name(sig: int) -> str:
    try:
        return f"signal {signal.Signals(sig).name}"
    except ValueError:
        return f"signal {sig}"


def _crash_location(output: str) -> str:
    """faulthandler prints 'File "...", line N in fn' frames; name the candidate's, if any."""
    for line in output.splitlines():
        m = _FRAME.match(line.strip())
        if m and "kcoder/" not in m["path"] and "site-packages" not in m["path"] and not m["path"].startswith("<"):
            return f" at {Path(m['path']).name}:{m['line']} in {m['fn']}"
    return ""
