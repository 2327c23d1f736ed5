"""SIGTERM and SIGHUP end kcoder the way Ctrl-C does.

By default either signal kills the Python process on the spot: no `finally` runs, so an
evaluation's child processes and temp folder outlive kcoder (a closed terminal or `timeout`
left a hanging candidate spinning for minutes). `install()` turns them into `Terminated`, a
KeyboardInterrupt, so every path Ctrl-C takes runs: the evaluator's `finally` kills its
process groups, the run writes its report, chat leaves its REPL. The exit status is then
128 + the signal's number, as if the signal had killed kcoder.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

_received: int | None = None


class Terminated(KeyboardInterrupt):
    """kcoder was asked to end (SIGTERM or SIGHUP): unlike Ctrl-C in chat, nothing goes on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name} (kcoder was asked to end)"


def _handle(signum: int, _frame: FrameType | None) -> None:
    global _received
    if _received is not None:
        return  # a second signal must not interrupt the clean-up the first one started
    _received = signum
    if signum == signal.SIGHUP:  # the terminal is gone: writing to it would fail the clean-up
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
    raise Terminated(signum)


def install() -> None:
    """Make SIGTERM and SIGHUP raise Terminated in the main thread (call from the main thread)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _handle)


def shutting_down() -> bool:
    """Whether kcoder has been asked to end: clean-up must not wait for anything optional."""
    return _received is not None


def exit_code() -> int | None:
    """128 + the signal that ended kcoder, or None when none did."""
    return None if _received is None else 128 + _received
