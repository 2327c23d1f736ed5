"""Jobs that outlive the evaluation that starts them (the .gch build, the light header's
macro scan): the evaluation's process group is killed when it ends, so they run in their own
session, and a marker file says one is running (trusted only while younger than its limit,
so a job killed with the machine does not block the next one forever).

A job that fails records its log as a failure, and later builds no longer start it. A job
that was killed (its limit, the out-of-memory killer, an evaluation ending while it ran) has
not failed: nothing is recorded, and the next build starts it again, up to KILLS_BEFORE_FAILED
times."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from kcoder.procs import spawn_detached

KILLS_BEFORE_FAILED = 3
# How a job's end by a signal shows: `timeout`'s 124 or a shell's 128+N, or gcc's driver, which
# exits 1 when the compiler proper is killed and says so (126, 127: a command that cannot run, a failure).
_KILLED_TEXT = "signal terminated program"


def job_script(body: str, log: Path, failed: Path, marker: Path, remove: tuple[Path, ...] = ()) -> str:
    """A shell script that runs `body` with its output in `log`; if it fails, copies the log to
    `failed` (after a kill, only once it has been killed KILLS_BEFORE_FAILED times: see kills_file);
    then removes `remove` and the running `marker`."""
    q = shlex.quote
    kills = q(str(kills_file(failed)))
    killed = f"[ $rc -eq 124 ] || [ $rc -gt 128 ] || grep -q {q(_KILLED_TEXT)} {q(str(log))}"
    record_kill = (f"echo $rc >> {kills}; [ $(wc -l < {kills}) -lt {KILLS_BEFORE_FAILED} ]"
                   f" || cp {q(str(log))} {q(str(failed))}")
    return (f"( {body} ) > {q(str(log))} 2>&1; rc=$?;"
            f" if [ $rc -ne 0 ]; then if {killed}; then {record_kill}; else cp {q(str(log))} {q(str(failed))}; fi; fi;"
            f" rm -f {' '.join(q(str(p)) for p in (*remove, marker))}")


def kills_file(failed: Path) -> Path:
    """Where a job's kills are counted, one line each."""
    return failed.with_name(failed.name + ".kills")


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
