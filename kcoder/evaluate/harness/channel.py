"""JSON lines between the judge and its two child processes (reference and candidate).

The judge writes requests to a child's stdin and reads replies from its stdout; the child
moves its own stdout/stderr to a log file first, so whatever a candidate prints never mixes
with replies. Nothing a candidate's process sends is trusted: a reply is data to validate
(bounded size, JSON, expected fields), never a verdict.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

MAX_LINE_BYTES = 256 * 1024
PHASES = ("import", "compile", "init")  # the only progress messages a child may send


class ChannelError(Exception):
    """The child broke the protocol, died or ran out of time; `kind` says which."""

    def __init__(self, kind: str, message: str, phase: str = "") -> None:
        super().__init__(message)
        self.kind, self.phase = kind, phase  # kind: "timeout" | "exited" | "tampered" | "memory"


@dataclass
class Limits:
    """Seconds allowed per phase a child announces (import, compile, init) and per request."""

    phases: dict[str, float]
    request_s: float


class Peer:
    """The judge's end of one child process. `notify` (optional) sees every request sent and
    every message received, after validation: progress display only, never a decision."""

    def __init__(self, proc: subprocess.Popen, limits: Limits, watch: Callable[[], str | None],
                 notify: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.proc, self.limits, self.watch = proc, limits, watch
        self.notify = notify or (lambda message: None)
        self.buffer = b""
        self.phase = ""

    def send(self, **message: Any) -> None:
        self.notify(message)
        stdin: BinaryIO = self.proc.stdin  # type: ignore[assignment]
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise ChannelError("exited", "the process exited", self.phase) from None

    def request(self, limit_s: float | None = None, **message: Any) -> dict[str, Any]:
        """Send one request and wait for its reply, honouring phase messages on the way."""
        self.send(**message)
        return self.receive(limit_s)

    def receive(self, limit_s: float | None = None, watch: bool = True) -> dict[str, Any]:
        """The next reply. `watch=False`: no memory scan while waiting (a reply the judge's
        clock waits for must not wait behind a scan of /proc)."""
        deadline = time.monotonic() + (limit_s if limit_s is not None else self.limits.request_s)
        while True:
            line = self._line(deadline, watch)
            try:
                message = json.loads(line)
            except ValueError:
                raise ChannelError("tampered", "a reply that is not JSON", self.phase) from None
            if not isinstance(message, dict):
                raise ChannelError("tampered", "a reply that is not a JSON object", self.phase)
            if "phase" in message and len(message) == 1:
                if message["phase"] not in PHASES:
                    raise ChannelError("tampered", f"an unknown phase {str(message['phase'])[:40]!r}", self.phase)
                self.phase = message["phase"]
                deadline = time.monotonic() + self.limits.phases[self.phase]
                self.notify(message)
                continue
            self.notify(message)
            return message

    def _line(self, deadline: float, watch: bool = True) -> bytes:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelError("timeout", "time limit", self.phase)
            problem = self.watch() if watch else None
            if problem:
                raise ChannelError("memory", problem, self.phase)
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.25))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait()
                raise ChannelError("exited", "the process exited", self.phase)
            self.buffer += chunk
            if len(self.buffer) > MAX_LINE_BYTES and b"\n" not in self.buffer:
                raise ChannelError("tampered", f"a reply longer than {MAX_LINE_BYTES} bytes", self.phase)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


class Link:
    """The child's end: requests on stdin, replies on a private copy of the original stdout;
    fd 1 and 2 then point at the log file, so prints of any code land there."""

    def __init__(self) -> None:
        reply_fd = os.dup(1)
        os.dup2(2, 1)  # the parent opened stderr on the log file
        self.out = os.fdopen(reply_fd, "w", buffering=1)
        self.inp = os.fdopen(os.dup(0), "r")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # code that reads stdin gets EOF, not the judge's requests

    def receive(self) -> dict[str, Any] | None:
        line = self.inp.readline()
        return json.loads(line) if line else None

    def reply(self, **message: Any) -> None:
        self.out.write(json.dumps(message, default=str) + "\n")
        self.out.flush()

    def phase(self, name: str) -> None:
        self.reply(phase=name)


def time_value(value: Any, allow_zero: bool = False) -> float | None:
    """A reported time in microseconds, or None when it is not a plausible one."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    if value < 0 or (value == 0 and not allow_zero) or value > 1e9:
        return None
    return float(value)


TRACE = os.environ.get("KCODER_TRACE") == "1"  # one stderr line per request: where the time goes


def trace(process: str, op: str, started: float) -> None:
    if TRACE:
        print(f"[kcoder trace] {process:9} {op:12} {time.perf_counter() - started:8.3f} s", file=sys.stderr)
