"""Jobs that outlive the evaluation that starts them (the .gch build, the light header's
macro scan): the evaluation's process group is killed when it ends, so they run in their own
session, and a marker file says one is running (trusted only while younger than its limit,
so a job killed with the machine does not block the next one forever)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from kcoder.procs import spawn_detached


def running(marker: Path, limit_s: float) -> bool:
    try:
        return time.time() - marker.stat().st_mtime < limit_s + 60
    except FileNotFoundError:
        return False


# Jobs this process started: an evaluation's sandbox kills every process of the candidate's
# when it ends, so the evaluation waits for these first (see wait_spawned).
SPAWNED: list[subprocess.Popen] = []


def spawn(script: str, env: dict[str, str] | None = None) -> None:
    """Run the shell `script` in its own session, detached from this process's terminal."""
    SPAWNED.append(spawn_detached(["sh", "-c", script], env))


def pending() -> int:
    """How many spawned jobs are still running."""
    return sum(1 for job in SPAWNED if job.poll() is None)


def wait_spawned(limit_s: float) -> int:
    """Wait up to `limit_s` for the spawned jobs; return how many are still running."""
    deadline = time.monotonic() + limit_s
    for job in SPAWNED:
        try:
            job.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    return pending()
