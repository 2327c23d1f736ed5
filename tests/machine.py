"""Watching the machine while the judge times its baselines (tests only).

A thread samples /proc every 50 ms inside a window: which processes of this test's own tree
were alive (the candidate's must not be), which processes with given names existed anywhere,
and how much of the host's CPU went to processes outside this tree (other users of a shared
host). /proc/stat counts every jiffy of every CPU, also those of processes that start and end
between two samples and the time the hypervisor stole.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

SAMPLE_S = 0.05


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, CPU ticks used so far, name) for every process now."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as fh:
                    stat = fh.read()
                rest = stat.rsplit(")", 1)[1].split()
                table[int(entry.name)] = (int(rest[1]), int(rest[11]) + int(rest[12]),
                                          stat[stat.find("(") + 1:stat.rfind(")")])
            except (OSError, IndexError, ValueError):
                continue
    return table


def can_run(pid: int) -> bool:
    """Not a zombie, and not past the point of exit where its memory is gone (a SIGKILLed
    process, or one in a PID namespace being torn down, takes a moment to go)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/statm") as fh:
            pages = int(fh.read().split()[0])
    except (OSError, IndexError, ValueError):
        return False
    return state not in ("Z", "X") and pages > 0


def tree(table: dict[int, tuple[int, int, str]], root: int) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.add(pid)
            todo.append(pid)
    return found


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs since boot; steal counts as busy (someone else's)."""
    with open("/proc/stat") as fh:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fh.readline().split()[1:9])
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


@dataclass
class Window:
    """What one window saw. `strays`: processes of this test's tree that were neither there
    before the window's owner started nor under an allowed root; `named`: processes with a
    watched name."""

    seconds: float = 0.0
    samples: int = 0
    strays: dict[int, str] = field(default_factory=dict)
    named: dict[int, str] = field(default_factory=dict)
    own_ticks: int = 0
    busy_ticks: int = 0
    total_ticks: int = 0
    foreign: Counter = field(default_factory=Counter)  # pid -> ticks, outside this test's tree
    names: dict[int, str] = field(default_factory=dict)

    def foreign_share(self) -> float:
        """The share of the host's CPU time used outside this test's tree (0..1)."""
        return max(0, self.busy_ticks - self.own_ticks) / max(1, self.total_ticks)

    def describe(self) -> str:
        top = ", ".join(f"{self.names.get(pid, '?')}[{pid}] {ticks * 1000 // os.sysconf('SC_CLK_TCK')} ms"
                        for pid, ticks in self.foreign.most_common(5))
        return (f"{self.seconds:.2f} s, {self.samples} samples, {self.foreign_share():.0%} of the CPU used "
                f"outside this test; busiest others: {top or 'none'}")


class Watch:
    """Windows of sampling: `with watch.window(allowed_root): ...`. Processes of this test's
    tree that existed when the Watch was made, and those under `allowed_root`, are allowed."""

    def __init__(self, names: tuple[str, ...] = ()) -> None:
        self.me, self.names = os.getpid(), names
        self.before = tree(process_table(), self.me)
        self.windows: list[Window] = []

    def _sample(self, window: Window, allowed_root: int, last: dict[int, tuple[int, int, str]]) -> dict:
        table = process_table()
        mine = tree(table, self.me)
        allowed = self.before | tree(table, allowed_root)
        window.strays.update({pid: table[pid][2] for pid in mine - allowed if can_run(pid)})
        window.named.update({pid: info[2] for pid, info in table.items() if info[2] in self.names and can_run(pid)})
        for pid, (_, ticks, name) in table.items():
            if pid not in mine and pid in last and ticks > last[pid][1]:
                window.foreign[pid] += ticks - last[pid][1]
                window.names[pid] = name
        window.samples += 1
        return table

    @contextmanager
    def window(self, allowed_root: int):
        window, stop = Window(), threading.Event()
        started, (busy0, total0) = time.monotonic(), cpu_jiffies()
        # a sample at each edge too: a window shorter than SAMPLE_S (a fast host's baselines) is
        # still watched
        first = self._sample(window, allowed_root, {})
        last = [first]

        def run() -> None:
            while not stop.wait(SAMPLE_S):
                last[0] = self._sample(window, allowed_root, last[0])

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield window
        finally:
            stop.set()
            thread.join()
            end = self._sample(window, allowed_root, last[0])
            busy1, total1 = cpu_jiffies()
            # own: this process (the judge, the sampler) and its tree, as far as they lived to the end
            window.own_ticks = sum(end[pid][1] - (first[pid][1] if pid in first else 0)
                                   for pid in tree(end, self.me))
            window.busy_ticks, window.total_ticks = busy1 - busy0, total1 - total0
            window.seconds = time.monotonic() - started
            self.windows.append(window)
