"""Long-running `kcoder optimize` jobs for the MCP `optimize` tool.

The run is a child process (`python -m kcoder optimize ...`) rather than a call in the server's
process: kcoder's optimize already owns everything a run needs (its run directory, report, the
SIGTERM clean-up that writes the report), a child can be stopped at any moment without leaving
threads behind, and a crash in it never takes the server down. Its output lines become progress
notifications; cancelling the request sends SIGTERM, which kcoder treats as Ctrl-C.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import Process

from kcoder.procs import child_env
from kcoder.settings import Settings

TAIL_LINES = 60  # what the tool's answer keeps of the output
GRACE_S = 60.0  # after SIGTERM: time to kill the evaluation and write the report
# "kcoder run directory: /path/to/run  ·  model ...": the path may hold spaces, the "·" ends it
RUN_DIR_RE = re.compile(r"run directory: (.+?)(?:\s+·.*)?$")

LineHandler = Callable[[int, str], Awaitable[None]]


@dataclass
class JobResult:
    """How a job ended. rc: the exit status (negative: killed by that signal)."""

    rc: int | None
    lines: list[str] = field(default_factory=list)  # the last TAIL_LINES lines
    run_dir: Path | None = None
    cancelled: bool = False

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def optimize_argv(problem: Path, settings: Settings) -> list[str]:
    """The child's command line: the same settings as the server's, no model (built-in policy)."""
    argv = [sys.executable, "-m", "kcoder", "optimize", str(problem), "--device", settings.device,
            "--precision", settings.precision, "--sandbox", settings.sandbox,
            "--max-turns", str(settings.max_turns), "--target", str(settings.target)]
    if settings.allow:
        argv += ["--allow", ",".join(settings.allow)]
    if settings.max_time is not None:
        argv += ["--max-time", str(settings.max_time)]
    return argv


async def run_job(argv: Sequence[str], cwd: Path, on_line: LineHandler, grace_s: float = GRACE_S,
                  env: dict[str, str] | None = None) -> JobResult:
    """Run `argv`, handing each output line (stdout and stderr together) to `on_line`. When the
    caller is cancelled, the child gets SIGTERM, then SIGKILL for its group after `grace_s`."""
    env = child_env(env)
    env.pop("KCODER_MODEL", None)  # the built-in policy: never a model picked up from the environment
    env["NO_COLOR"] = "1"  # plain lines, no escape codes, in the notifications
    env["COLUMNS"] = "200"  # rich wraps at 80 columns without a terminal: one notification per line
    result = JobResult(rc=None)
    process = await anyio.open_process(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        await _pump(process, result, on_line)
        result.rc = await process.wait()
    except anyio.get_cancelled_exc_class():
        result.cancelled = True
        with anyio.CancelScope(shield=True):
            result.rc = await _stop(process, grace_s)
        raise
    finally:
        if process.returncode is None:  # an error in on_line: never leave the run behind
            with anyio.CancelScope(shield=True):
                await _stop(process, 0.0)
    return result


async def _pump(process: Process, result: JobResult, on_line: LineHandler) -> None:
    assert process.stdout is not None
    pending, count = b"", 0
    async for chunk in process.stdout:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            count += 1
            await _line(raw, count, result, on_line)
    if pending:
        await _line(pending, count + 1, result, on_line)


async def _line(raw: bytes, number: int, result: JobResult, on_line: LineHandler) -> None:
    line = raw.decode(errors="replace").rstrip("\r")
    found = RUN_DIR_RE.search(line)
    if found and result.run_dir is None:
        result.run_dir = Path(found.group(1))
    result.lines = [*result.lines[-(TAIL_LINES - 1):], line]
    await on_line(number, line)


async def _stop(process: Process, grace_s: float) -> int:
    """SIGTERM the child (kcoder ends like Ctrl-C: evaluation killed, report written), then
    SIGKILL its whole process group if it is still there after `grace_s`."""
    if process.returncode is None and grace_s > 0:
        process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(grace_s):
            return await process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return await process.wait()
