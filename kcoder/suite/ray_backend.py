"""The Ray backend: one actor per device slot, on a local Ray runtime or an existing cluster.

Each actor holds its slot for its whole life (a GPU: `num_gpus=1`, so Ray pins it with
CUDA_VISIBLE_DEVICES and never gives it to another actor; the cpu target: a share of the
cluster's cores) and runs one task at a time, as the same task process the pool backend
starts (schedule.execute_task), on whichever node Ray placed it. The task process writes
into that node's own build cache (its KCODER_CACHE, default ~/.cache/kcoder on its disk)
and torch.compile's cache (/tmp there), so nothing is shared between nodes but the
records, which come back to the driver. `pip install kcoder[ray]`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from typing import Any

from kcoder.suite.schedule import Execute, Record, Slot, execute_task


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def connect(address: str | None) -> None:
    """Join the cluster at `address`, or start a local runtime over this host's cores (once)."""
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    else:
        ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)


def cluster_slots(device: str, workers: int | None) -> list[tuple[Slot, dict[str, Any]]]:
    """Slots over the whole cluster, each with the actor options that reserve its device."""
    import ray

    resources = ray.cluster_resources()
    cpus = int(resources.get("CPU", 1))
    if device == "cuda":
        gpus = int(resources.get("GPU", 0))
        if gpus == 0:
            raise ValueError("--device cuda asked for, but the Ray cluster has no GPU")
        count = min(gpus, workers or gpus)
        jobs = str(max(1, cpus // gpus))
        return [(Slot(f"gpu{i}", {"MAX_JOBS": jobs}), {"num_gpus": 1, "num_cpus": 0}) for i in range(count)]
    count = max(1, min(workers or max(1, cpus // 8), cpus))
    share = max(1, cpus // count)
    env = {"OMP_NUM_THREADS": str(share), "MAX_JOBS": str(share)}
    return [(Slot(f"cpu{i}", env), {"num_cpus": share}) for i in range(count)]


class SlotWorker:
    """A Ray actor's body: runs tasks on its slot, one at a time."""

    def __init__(self, slot: Slot, execute: Execute) -> None:
        import ray

        ids = ray.get_gpu_ids()
        where = ray.get_runtime_context().get_node_id()[:8]
        name = f"{where}/cuda:{','.join(str(i) for i in ids)}" if ids else f"{where}/{slot.name}"
        self.slot = Slot(name, slot.env)
        self.execute = execute

    def run(self, spec: dict[str, Any]) -> Record:
        try:
            return self.execute(spec, self.slot)
        except Exception as exc:  # kcoder's own failure around the task: that task's record
            return {"name": spec["name"], "mode": spec["mode"], "problem": spec["problem"], "status": "error",
                    "reason": f"ray worker: {exc}"[:300], "verdict": None, "slot": self.slot.name}


def run_ray(specs: list[dict[str, Any]], slots: list[tuple[Slot, dict[str, Any]]],
            on_result: Callable[[Record], None], execute: Execute = execute_task) -> None:
    """Run every spec on the slots' actors as they free up; `on_result` sees each record in
    completion order. The actors end with the suite."""
    import ray
    from ray.util import ActorPool

    actor_class = ray.remote(SlotWorker)
    actors = [actor_class.options(**options).remote(slot, execute) for slot, options in slots]
    try:
        pool = ActorPool(actors)
        for spec in specs:
            pool.submit(lambda actor, s: actor.run.remote(s), spec)
        while pool.has_next():
            on_result(pool.get_next_unordered())
    finally:
        for actor in actors:
            ray.kill(actor)
