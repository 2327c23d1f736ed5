"""One device, one timer: a cross-process lock per device that every step running work on it holds.

An evaluation (the reference process's forward passes and baselines, the candidate's
construction, verification and timing), a profile and each tuning point run work on a device;
two of them at once would each time the other's load, and kcoder caches timings as facts. Each
takes this lock for the device it uses: an flock on a file beside the build cache
($KCODER_CACHE/locks), which the kernel drops when its holder dies, so a killed kcoder never
leaves it stuck. Host work (compiling for a GPU) takes no lock.

Which device:
- cuda: the GPU the step uses, the first that CUDA_VISIBLE_DEVICES leaves visible (a suite slot
  pins one; the same GPU spelt once by index and once by UUID counts as two);
- cpu: every core the process may run on, one lock per core taken in ascending order (so
  overlapping sets never deadlock): the suite's cpu slots hold disjoint shares and run side by
  side, while an evaluation on all cores waits for all of them.

Within a process the lock is re-entrant for the thread that holds it and exclusive between
threads (tune's build-ahead threads). A holder that waits prints nothing itself: `on_wait` is
told once, for a status line.

KCODER_DEVICE_TRACE names a file to which every held interval, and the events kcoder's steps
record with `trace_event`, are appended as JSON lines: how the tests show that no two timings
ever overlap.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kcoder.paths import cache_root

POLL_S = 0.05
TRACE_ENV = "KCODER_DEVICE_TRACE"


class _Slot:
    """One key's state in this process: which thread holds it, how deeply, the locked file."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None


_slots: dict[str, _Slot] = {}
_slots_guard = threading.Lock()


def device_keys(device: str) -> list[str]:
    """The lock names of `device` as this process uses it (see the module docstring)."""
    if device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        first = visible.split(",")[0].strip() if visible is not None else "0"
        return [_safe(f"cuda-{first or 'none'}")]
    return [f"cpu-{core:04d}" for core in sorted(os.sched_getaffinity(0))]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]


def lock_dir() -> Path:
    return cache_root() / "locks"


def _slot(key: str) -> _Slot:
    with _slots_guard:
        return _slots.setdefault(key, _Slot())


class DeviceTurn:
    """The lock of one device for one step (`what` names it in the trace). `claim` is
    idempotent; `release` gives back what `claim` took. Also a context manager."""

    def __init__(self, device: str, what: str, on_wait: Callable[[str], None] | None = None) -> None:
        self.device, self.what, self.on_wait = device, what, on_wait
        self.taken: list[_Slot] = []
        self.since: float | None = None

    @property
    def held(self) -> bool:
        return bool(self.taken)

    def claim(self) -> None:
        if self.taken:
            return
        told = False
        try:
            for key in device_keys(self.device):  # ascending: overlapping core sets never deadlock
                slot = _slot(key)
                while not self._take(key, slot):
                    if not told and self.on_wait is not None:
                        self.on_wait(f"waiting for the {self.device} device: another kcoder step is using it")
                    told = True
                    time.sleep(POLL_S)
        except BaseException:
            self.release()
            raise
        self.since = time.time()

    def _take(self, key: str, slot: _Slot) -> bool:
        """One try at `key`: the thread lock first (threads of this process), then the file."""
        if not slot.lock.acquire(timeout=POLL_S):
            return False
        if slot.depth == 0:
            path = lock_dir() / f"{key}.lock"
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                slot.lock.release()
                return False
            slot.fd = fd
        slot.depth += 1
        self.taken.append(slot)
        return True

    def release(self) -> None:
        if self.since is not None:
            trace_event("held", what=self.what, device=self.device, start=self.since, end=time.time())
            self.since = None
        while self.taken:
            slot = self.taken.pop()
            slot.depth -= 1
            if slot.depth == 0 and slot.fd is not None:
                fcntl.flock(slot.fd, fcntl.LOCK_UN)
                os.close(slot.fd)
                slot.fd = None
            slot.lock.release()

    def __enter__(self) -> DeviceTurn:
        self.claim()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def trace_event(kind: str, **fields: Any) -> None:
    """Append one event to $KCODER_DEVICE_TRACE (nothing when it is unset)."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    record = {"kind": kind, "pid": os.getpid(), "thread": threading.get_ident(), "t": time.time(), **fields}
    line = json.dumps(record, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())  # one write per line: lines of concurrent processes never mix
    finally:
        os.close(fd)
