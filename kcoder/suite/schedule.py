"""Where a suite's tasks run: slots (one device each) and the local process-pool backend.

A slot is one evaluation at a time on one device: a GPU (pinned with CUDA_VISIBLE_DEVICES)
or, on the cpu target, a share of the host's cores (pinned by affinity, OMP_NUM_THREADS).
Builds run inside each task's evaluation, so with one task per GPU they spread over the
CPU cores (MAX_JOBS: the node's cores divided among its slots). The pool backend runs one
thread per slot that takes the next task and runs it as a process of its own
(`kcoder.suite.task`, under the reaper: killing the suite ends it); the Ray backend
(ray_backend.py) runs the same processes from one actor per slot, so results are the same
JSON whichever runs them. A task's evaluations hold their slot's device lock (devicelock.py:
the GPU its CUDA_VISIBLE_DEVICES names, or the cores it is pinned to), so any other kcoder
process on that device takes turns with them.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TASK_LIMIT_S = 24 * 3600.0  # a task's own limits (the evaluator's, optimize's) end it long before

Record = dict[str, Any]
Execute = Callable[[dict[str, Any], "Slot"], Record]


@dataclass(frozen=True)
class Slot:
    """One device a task may hold: its name and the environment that pins the task to it."""

    name: str
    env: dict[str, str] = field(default_factory=dict)


def gpu_slots(count: int, cores: int, visible: str | None = None) -> list[Slot]:
    """One slot per visible GPU (`visible`: CUDA_VISIBLE_DEVICES as set, kept as given)."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    jobs = str(max(1, cores // max(1, len(ids))))
    return [Slot(f"cuda:{i}", {"CUDA_VISIBLE_DEVICES": i, "MAX_JOBS": jobs}) for i in ids[:count]]


def cpu_slots(workers: int, cores: int) -> list[Slot]:
    """`workers` slots over the host's cores, each pinned to its own share of them."""
    workers = max(1, min(workers, cores))
    share = cores // workers
    slots = []
    for w in range(workers):
        ids = ",".join(str(c) for c in range(w * share, (w + 1) * share))
        slots.append(Slot(f"cpu:{w}", {"KCODER_SUITE_CPUS": ids, "OMP_NUM_THREADS": str(share),
                                         "MAX_JOBS": str(share)}))
    return slots


def local_slots(device: str, workers: int | None) -> list[Slot]:
    """The slots of this machine: its visible GPUs, or `workers` shares of its cores."""
    cores = len(os.sched_getaffinity(0))
    if device == "cpu":
        return cpu_slots(workers or max(1, cores // 8), cores)
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise ValueError("--device cuda asked for, but torch sees no CUDA GPU here")
    return gpu_slots(min(count, workers or count), cores, os.environ.get("CUDA_VISIBLE_DEVICES"))


def execute_task(spec: dict[str, Any], slot: Slot, module: str = "kcoder.suite.task") -> Record:
    """Run one task's process (`python -m module SPEC RESULT`; kcoder.env.episode for rollouts)
    pinned to `slot`; its record (an error record when it died)."""
    from kcoder.procs import child_env, run

    with tempfile.TemporaryDirectory(prefix="kcoder-suite-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "record.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "kcoder.evaluate.reaper", sys.executable, "-m", module,
               str(spec_path), str(out_path)]
        result = run(cmd, TASK_LIMIT_S, cwd=Path(tmp), env=child_env(**slot.env))
        if out_path.exists():
            record = json.loads(out_path.read_text())
        else:
            tail = result.output.strip().splitlines()[-1:] or ["no output"]
            record = {"name": spec["name"], "mode": spec["mode"], "problem": spec["problem"], "status": "error",
                      "reason": f"the task's process ended without a result (exit {result.rc}): {tail[0][:200]}",
                      "verdict": None, "seconds": result.seconds}
    record["slot"] = slot.name
    return record


def pin_to_slot() -> None:
    """In a task's process: keep to the cores its slot names (cpu target)."""
    cores = os.environ.get("KCODER_SUITE_CPUS")
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})


def run_pool(specs: list[dict[str, Any]], slots: list[Slot], on_result: Callable[[Record], None],
             execute: Execute = execute_task) -> None:
    """Run every spec, one at a time per slot, as slots free up; `on_result` (called in this
    thread, in completion order) sees each record as soon as it is done."""
    todo: queue.Queue[dict[str, Any]] = queue.Queue()
    for spec in specs:
        todo.put(spec)
    done: queue.Queue[Record | None] = queue.Queue()

    def worker(slot: Slot) -> None:
        while True:
            try:
                spec = todo.get_nowait()
            except queue.Empty:
                done.put(None)
                return
            try:
                done.put(execute(spec, slot))
            except Exception as exc:  # kcoder's own failure around the task: that task's record
                done.put({"name": spec["name"], "mode": spec["mode"], "problem": spec["problem"],
                          "status": "error", "reason": f"scheduler: {exc}"[:300], "verdict": None,
                          "slot": slot.name})

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in slots]
    for t in threads:
        t.start()
    finished = 0
    while finished < len(threads):
        record = done.get()
        if record is None:
            finished += 1
        else:
            on_result(record)
    for t in threads:
        t.join(timeout=1)
