"""Scheduling over many devices, with fake devices on the cpu target: each task holds its slot's
device exclusively (checked by the tasks themselves, with lock files no second holder can
create), every device is used, tasks run in parallel, and each runs exactly once, on the
process pool and on a real local Ray runtime alike."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kcoder.suite.schedule import Slot, cpu_slots, gpu_slots, run_pool

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_runtime():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def fake_executor(folder: Path):
    """A task that takes its slot's device for a moment: it creates the device's lock file
    (O_EXCL: fails when another task holds it), logs its interval, and frees it. A closure, so
    Ray ships it to its workers by value."""

    def execute(spec: dict, slot: Slot) -> dict:
        device = slot.env["CUDA_VISIBLE_DEVICES"]
        lock = folder / f"device-{device}.lock"
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return {"name": spec["name"], "status": "overlap", "device": device}
        started = time.time()
        time.sleep(spec["sleep"])
        ended = time.time()
        os.close(fd)
        os.unlink(lock)
        return {"name": spec["name"], "status": "ok", "device": device, "start": started, "end": ended}

    return execute


def specs(n: int) -> list[dict]:
    return [{"name": f"p{i:02d}", "mode": "eval", "problem": f"p{i}.py", "sleep": 0.15 + 0.1 * (i % 3)}
            for i in range(n)]


def check_schedule(records: list[dict], devices: set[str]) -> None:
    assert sorted(r["name"] for r in records) == [s["name"] for s in specs(len(records))]  # each once
    assert all(r["status"] == "ok" for r in records), [r for r in records if r["status"] != "ok"]
    assert {r["device"] for r in records} == devices  # every device was used
    for device in devices:  # and held by one task at a time (the lock files say so too)
        spans = sorted((r["start"], r["end"]) for r in records if r["device"] == device)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running, peak = 0, 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert 1 < peak <= len(devices)  # in parallel, never more tasks than devices


def test_pool_over_fake_gpus(tmp_path):
    slots = gpu_slots(4, cores=16)
    records: list[dict] = []
    run_pool(specs(12), slots, records.append, execute=fake_executor(tmp_path))
    check_schedule(records, {"0", "1", "2", "3"})


def test_ray_over_fake_gpus(tmp_path, ray_runtime):
    from kcoder.suite.ray_backend import run_ray

    # Fake devices: actors that reserve no real resource, each pinned to its device by its slot.
    slots = [(Slot(f"fake{i}", {"CUDA_VISIBLE_DEVICES": str(i)}), {"num_cpus": 0}) for i in range(3)]
    records: list[dict] = []
    run_ray(specs(9), slots, records.append, execute=fake_executor(tmp_path))
    check_schedule(records, {"0", "1", "2"})


def test_gpu_slots_keep_the_visible_devices_and_share_the_cores():
    slots = gpu_slots(2, cores=32, visible="2,5")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["2", "5"]
    assert {s.env["MAX_JOBS"] for s in slots} == {"16"}  # builds spread over the host's cores
    cpu = cpu_slots(3, cores=12)
    assert [s.env["KCODER_SUITE_CPUS"] for s in cpu] == ["0,1,2,3", "4,5,6,7", "8,9,10,11"]
    assert {s.env["OMP_NUM_THREADS"] for s in cpu} == {"4"}
