"""Nothing a candidate can write is trusted (issue 37), cpu target, under bubblewrap.

- A candidate whose C++ makes raw system calls at import (the `syscall` instruction spelt as
  bytes: no libc name for a static check to see) tries to create or overwrite a file in every
  part of kcoder's cache: the shared build products, another key's build folder, tune/,
  profile/devices.json, locks/, baselines/, the signing key's folder. Only its own private
  build folder takes a file (its report of what each call returned). With `--sandbox none`
  the same calls succeed: the contrast shows the test measures something.
- Tune cache entries and device ceilings are believed only with kcoder's MAC.
- The files the unconfined reference process writes (init.pt, weights.pt) and reads (the
  candidate's saved outputs): a link planted there is never followed, and a candidate cannot
  plant one in kcoder's hand-off folder at all.

The raw-syscall source (tests/sources.py:RAW_SYSCALL_CPP) is one build, shared by both modes.
"""

from __future__ import annotations

import json
import platform
import uuid
from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options
from sources import RAW_SYSCALL_CPP

from kcoder.build.requests import private_build_root
from kcoder.evaluate.sandbox import bwrap_usable
from kcoder.paths import cache_root

needs_bwrap = pytest.mark.skipif(not bwrap_usable(), reason="bwrap unusable here")

RAW_CANDIDATE = '''import os

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_raw = load_inline(name="kcoder_rawsys", cpp_sources=[{source!r}], functions=["plant"], extra_cflags=["-O1"])
_raw.plant({targets!r}, os.path.join(os.environ.get("KCODER_BUILD_ROOT", "/nonexistent"), "proof-{nonce}.txt"))


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x, y):
        return x
'''


def _targets(nonce: str) -> tuple[list[Path], dict[Path, bytes]]:
    """Files the candidate tries to create, and existing files it tries to overwrite (with
    their contents now)."""
    cache = cache_root()
    other_build = cache / "build" / f"other_ext-{nonce[:16]}"  # another key's build folder
    folders = [cache, cache / "objects", cache / "pch", cache / "light", cache / "build", other_build,
               cache / "tune", cache / "profile", cache / "locks", cache / "baselines", cache / "private"]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    existing = {other_build / "other_ext.so": b"an honest build", cache / "profile" / "devices.json": b"{}",
                cache / "locks" / f"cpu-{nonce[:8]}.lock": b""}
    for path, data in existing.items():
        if not path.exists():
            path.write_bytes(data)
    return [folder / f"planted-{nonce}" for folder in folders], {p: p.read_bytes() for p in existing}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the raw system calls are x86-64 code")
@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_raw_syscalls_leave_nothing_in_the_cache_outside_the_own_build(tmp_path, mode):
    from kcoder.evaluate import evaluate

    nonce = uuid.uuid4().hex
    created, existing = _targets(nonce)
    targets = "\n".join(str(p) for p in [*created, *existing])
    candidate = tmp_path / "model_new.py"
    candidate.write_text(RAW_CANDIDATE.format(source=RAW_SYSCALL_CPP, targets=targets, nonce=nonce))
    # Static checks off: they are a first line only; this is about the sandbox behind them.
    verdict = evaluate(PROBLEMS / "scale_add.py", candidate,
                       fast_options(stop_after="build", sandbox=mode, static_checks=False))
    assert verdict.compiled, verdict.reason
    proof = private_build_root(candidate) / f"proof-{nonce}.txt"
    assert proof.is_file(), "the candidate's code never ran: the test shows nothing"
    results = dict(line.rsplit(" ", 1) for line in proof.read_text().splitlines())
    assert set(results) == set(targets.splitlines())
    planted = [p for p in created if p.exists()]
    overwritten = [p for p, data in existing.items() if p.read_bytes() != data]
    if mode == "none":  # runs as the user: the same calls reach the cache
        assert planted and overwritten, results
        for path in planted:
            path.unlink()
        for path, data in existing.items():
            path.write_bytes(data)
        return
    assert planted == [] and overwritten == [], results
    # the shared build products are there to read, and refuse a write (EROFS); the rest of the
    # cache is not there at all (a file made in its place lands in a private tmpfs, gone after)
    shared = [p for p in created[1:6]] + [next(iter(existing))]
    assert all(results[str(p)] == "-30" for p in shared), results
    # and nothing anywhere in the cache but its own report
    assert [p for p in cache_root().rglob(f"*{nonce}*") if p.is_file() and p.suffix != ".lock"
            and p.parent.name != f"other_ext-{nonce[:16]}"] == [proof]


def test_forged_tune_entry_is_not_believed(tmp_path, monkeypatch):
    from kcoder.tune.cache import TuneCache

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))
    problem = tmp_path / "problem.py"
    problem.write_text("# a problem\n")

    def fresh() -> TuneCache:
        return TuneCache("kernel-key", problem, {"device": "cpu", "name": "test cpu"}, {"precision": "strict"})

    fresh().store_point("BLOCK=64", {"status": "rejected", "reward": -1, "reason": "wrong answer"})
    assert fresh().point("BLOCK=64")["status"] == "rejected"  # kcoder's own entry is believed
    path = fresh().path
    data = json.loads(path.read_text())
    data["points"]["BLOCK=64"].update(status="accepted", reward=3)  # forged, old MAC kept
    path.write_text(json.dumps(data))
    assert fresh().point("BLOCK=64") is None
    del data["kcoder_mac"]  # unsigned
    path.write_text(json.dumps(data))
    assert fresh().point("BLOCK=64") is None


def test_forged_device_ceilings_are_not_believed(tmp_path, monkeypatch):
    from kcoder.device_limits import DeviceLimits, load_limits, save_limits

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))
    save_limits(DeviceLimits(device="test device", copy_bytes_per_s=1e10, fp32_flops_per_s=1e11))
    assert load_limits("test device").copy_bytes_per_s == 1e10  # kcoder's own entry is believed
    path = tmp_path / "cache" / "profile" / "devices.json"
    data = json.loads(path.read_text())
    data["test device"]["copy_bytes_per_s"] = 1e15  # a slow "speed of light", so anything looks fast
    path.write_text(json.dumps(data))
    assert load_limits("test device") is None
    data["forged device"] = {"device": "forged device", "copy_bytes_per_s": 1.0, "fp32_flops_per_s": 1.0}
    path.write_text(json.dumps(data))
    assert load_limits("forged device") is None


def _reference(tmp_path: Path, init: Path, weights: Path):
    import torch

    from kcoder.evaluate.reference.server import ReferenceServer

    job = {"problem": str(PROBLEMS / "scale_add.py"), "candidate": None, "options": fast_options().to_dict(),
           "init_path": str(init), "weights_path": str(weights)}
    server = ReferenceServer(job, link=None)
    server.torch = torch
    server._load_problem()
    return server


def test_links_at_the_reference_process_paths_are_never_followed(tmp_path):
    """init.pt and weights.pt (written) and a saved output (read, then removed): links planted at
    each, or at the folder above, change no file outside."""
    victim_dir = tmp_path / "users_files"
    victim_dir.mkdir()
    victims = {name: victim_dir / name for name in ("notes.txt", "more.txt", "out-1.pt")}
    for path in victims.values():
        path.write_text("the user's own words")
    handoff = tmp_path / "handoff"
    handoff.mkdir()
    (handoff / "init.pt").symlink_to(victims["notes.txt"])
    (handoff / "weights.pt").symlink_to(victims["more.txt"])
    server = _reference(tmp_path, handoff / "init.pt", handoff / "weights.pt")
    assert not (handoff / "init.pt").is_symlink() and not (handoff / "weights.pt").is_symlink()
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "out-0.pt").symlink_to(victims["notes.txt"])
    result = server.op_check(seed=1, path=str(outputs / "out-0.pt"), label="input set 1")
    assert not result["ok"] and "could not be read back" in result["reason"]
    assert not (outputs / "out-0.pt").is_symlink()  # the link itself is gone
    (tmp_path / "io").symlink_to(victim_dir, target_is_directory=True)  # the folder replaced by a link
    result = server.op_check(seed=1, path=str(tmp_path / "io" / "out-1.pt"), label="input set 2")
    assert not result["ok"] and "could not be read back" in result["reason"]
    assert all(path.read_text() == "the user's own words" for path in victims.values())


PLANTER = '''import json
import os
import sys
import time

import torch.nn as nn

_job = json.loads(open(sys.argv[-1]).read())
_box = os.getcwd()
_targets = [_job["init_path"], _job["weights_path"], os.path.join(_box, "io", "init.pt"),
            os.path.join(_box, "io", "weights.pt")]
_deadline = time.monotonic() + 20
# Race the reference process: keep a link at every path until it has written its files.
while time.monotonic() < _deadline:
    for _path in _targets:
        try:
            if not os.path.islink(_path):
                if os.path.exists(_path):
                    os.remove(_path)
                os.symlink({victim!r}, _path)
        except OSError:
            pass
    if all(os.path.isfile(p) and not os.path.islink(p) for p in _targets[:2]):
        break
    time.sleep(0.01)
_names = ["init.pt", "weights.pt", "io/init.pt", "io/weights.pt"]
with open(os.path.join(os.environ["KCODER_BUILD_ROOT"], "planted.json"), "w") as _fh:
    json.dump({{n: os.path.islink(p) for n, p in zip(_names, _targets)}}, _fh)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x, y):
        return x
'''


@needs_bwrap
def test_candidate_cannot_plant_links_where_the_reference_writes(tmp_path):
    from kcoder.evaluate import evaluate

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own words")
    candidate = tmp_path / "model_new.py"
    candidate.write_text(PLANTER.format(victim=str(victim)))
    verdict = evaluate(PROBLEMS / "scale_add.py", candidate,
                       fast_options(stop_after="build", sandbox="bwrap", static_checks=False))
    assert verdict.compiled, verdict.reason
    assert victim.read_text() == "the user's own words"
    planted = json.loads((private_build_root(candidate) / "planted.json").read_text())
    # kcoder's hand-off folder is read-only to it; its own box is its own
    assert planted == {"init.pt": False, "weights.pt": False, "io/init.pt": True, "io/weights.pt": True}, planted
