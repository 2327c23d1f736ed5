"""A process that outlives nothing: runs one command and, when it ends or when told to stop,
kills every process descended from it, also the ones that left its session and cleared
their environment (as a child subreaper, the orphans of its descendants become its own).

Used for the candidate's process when there is no bwrap PID namespace to do this:
`python -m kcoder.evaluate.reaper CMD...` (stdin/stdout/stderr pass through).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def descendants(root: int) -> list[int]:
    """Pids of every live process below `root` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def kill_descendants() -> None:
    """SIGKILL everything below this process and reap it, until nothing is left."""
    for _ in range(50):
        pids = descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def main() -> None:
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the judge died: clean up all the same

    def stop(_sig: int, _frame: object) -> None:
        kill_descendants()
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)
    # close_fds=False: the descriptors the judge passed on (handoff.py's socket) reach the child;
    # every other descriptor of this process is non-inheritable (PEP 446) and stays here.
    child = subprocess.Popen(sys.argv[1:], close_fds=False)
    code = child.wait()
    kill_descendants()
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
