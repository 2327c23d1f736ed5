"""Every process of the candidate's stopped while trusted code reads what it left (arenaclock.py).

The judge's clock stops on the candidate's "done"; its outputs are read after that. A process
that said "done" early and kept computing (a thread of its own, a child) would have its late
work counted as done in time; stopped (SIGSTOP cannot be caught or ignored), it writes nothing
more until the reading is over.
"""

from __future__ import annotations

import os
import signal
import time

STOP_WAIT_S = 1.0  # how long the judge waits for every process to be seen stopped
STOPPED = {"T", "t", "Z", "X"}  # stopped, traced, or gone


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def freeze(root: int | None) -> set[int]:
    """`root` (a process the judge started: the candidate's, or the reference's while the
    candidate's batch runs, arenaclock.py) and every process below it stopped; returns them (for
    `thaw`). Every process of the candidate's is below `root`: in
    bwrap's PID namespace an orphan is re-parented to the namespace's first process, and without
    bwrap to the reaper (a child subreaper), both below `root`. Processes found after the first
    stop (started in between) are stopped too."""
    from kcoder.evaluate.reaper import descendants

    stopped: set[int] = set()
    for _ in range(3):  # a process started while the others were being stopped is found next round
        found = {root, *descendants(root)} if root else set()
        new = found - stopped
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        stopped |= new
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and any(_state(pid) not in STOPPED for pid in stopped):
        time.sleep(0.0002)
    return stopped


def thaw(pids: set[int]) -> None:
    _signal(pids, signal.SIGCONT)
