"""The one way kcoder runs a child process: its own session (process group), a deadline,
a known environment, output through a file (a chatty child can never block kcoder), and
the whole group killed at the end, stray children included (`run`); a job the caller polls
and kills (`spawn_logged`); or, for a job meant to outlive its starter, its own session and
nothing else (`spawn_detached`).

Three starters stay outside on purpose, each ended by this module's `kill_group` or by
itself: the evaluator's two processes (evaluate/spawn.py: long-lived peers on pipes to the
judge), the reaper's one child (evaluate/reaper.py: it must stay in the reaper's group and
inherit its stdio; the reaper is the killer) and the MCP server's optimize job (mcp/jobs.py:
an async process whose lines are streamed as they come).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcoder.paths import package_root

# What kcoder keeps of a child's output: the tail, so a 10 MB print costs nothing.
OUTPUT_TAIL_BYTES = 64 * 1024


@dataclass
class RunResult:
    """How a limited subprocess ended: rc None when it could not start or was killed."""

    rc: int | None
    output: str
    timed_out: bool
    seconds: float


def child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (default: this process's environment) with this kcoder importable first on
    PYTHONPATH and unbuffered output, plus `extra` variables."""
    env = dict(os.environ if base is None else base)
    root = str(package_root())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (compilers, stray children) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def read_tail(path: Path, limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last `limit` bytes of a file, decoded; a cut is marked at the start."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        data = fh.read()
    text = data.decode(errors="replace")
    return f"[... {size - limit} bytes cut ...]\n{text}" if size > limit else text


def last_line(path: Path, limit: int = 2000) -> str:
    """The last non-empty line of a log file ("no output" if it has none)."""
    return (read_tail(path, limit).strip().splitlines() or ["no output"])[-1]


def run(cmd: Sequence[str], timeout_s: float, cwd: Path, env: Mapping[str, str] | None = None,
        tail_bytes: int | None = OUTPUT_TAIL_BYTES, stdin_text: str | None = None) -> RunResult:
    """Run `cmd` in a new session; at the limit SIGKILL its whole process group. The output
    (stdout and stderr together) is kept up to its last `tail_bytes` (None: all of it, for
    output that is data, such as ncu's CSV pages). `stdin_text` is its input (from a file,
    so a child that does not read it cannot block kcoder either)."""
    started = time.monotonic()
    with tempfile.NamedTemporaryFile(prefix="kcoder-run-") as log, tempfile.TemporaryFile() as stdin:
        stdin.write((stdin_text or "").encode())
        stdin.seek(0)
        try:
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=None if env is None else dict(env), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=stdin if stdin_text is not None else
                                    subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return RunResult(None, f"cannot run {cmd[0]}: {exc}", False, 0.0)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(proc)  # stray children too, even after a normal exit
        log.flush()
        output = read_tail(Path(log.name), tail_bytes) if tail_bytes else Path(log.name).read_bytes().decode(
            errors="replace")
    return RunResult(None if timed_out else proc.returncode, output, timed_out, round(time.monotonic() - started, 2))


def spawn_logged(cmd: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    """Start `cmd` in its own session, its output appended to `log`, and return at once: for a
    job the caller polls and ends with `kill_group` (the build service's builders)."""
    with open(log, "ab") as fh:  # the child holds its own descriptor from here
        return subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, env=dict(env),
                                cwd=cwd, start_new_session=True)


def spawn_detached(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` in its own session, without input or output, and leave it running: for jobs
    that must outlive the process group that starts them (build/detached.py keeps the handle;
    the job's own command carries its time limit)."""
    return subprocess.Popen(list(cmd), start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=None if env is None else dict(env))
