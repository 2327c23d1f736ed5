"""Run the real `kcoder` CLI in a pseudo-terminal, as a person at a terminal would see it.

`PtyRun` starts `python -m kcoder ARGS` with stdin, stdout and stderr on a pty (so rich shows
its live status and prompt_toolkit its prompt), collects everything written, and offers
`expect(pattern)` on the text with ANSI escapes removed (and carriage returns, which redraw
a status line, turned into newlines so every state of the line can be matched).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\x1b\][^\x07]*\x07")


def plain(raw: str) -> str:
    """Terminal output as text: escapes removed, each redraw of a line on a line of its own."""
    return ANSI.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")


class PtyRun:
    """`python -m kcoder *args` on a pty of `columns` columns, in `cwd`, with `env` added."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None, columns: int = 120) -> None:
        master, slave = pty.openpty()
        import fcntl
        import struct
        import termios

        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        full_env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": "40",
                    "PYTHONPATH": str(ROOT), "PROMPT_TOOLKIT_NO_CPR": "1", **(env or {})}
        full_env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "kcoder", *args], stdin=slave, stdout=slave,
                                     stderr=slave, cwd=cwd, env=full_env, start_new_session=True)
        os.close(slave)
        self.master = master
        self.raw = b""

    @property
    def text(self) -> str:
        return plain(self.raw.decode(errors="replace"))

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.raw += chunk
        return bool(chunk)

    def expect(self, pattern: str, timeout: float = 300.0) -> re.Match[str]:
        """Wait until `pattern` (a regex) appears in the plain text; AssertionError with the
        text so far when it does not, or when the process ends first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = regex.search(self.text)
            if found:
                return found
            if not self._read(0.2) and self.proc.poll() is not None:
                break
        found = regex.search(self.text)
        assert found, f"{pattern!r} not seen in:\n{self.text[-6000:]}"
        return found

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 120.0) -> int:
        """Read until the process exits; its exit code."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.05) and select.select([self.master], [], [], 0)[0]:
            pass
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)
