"""Where outputs travel between the candidate's process and the reference process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcoder.evaluate import spawn
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.sandbox import bwrap_argv

needs_shm = pytest.mark.skipif(not spawn.SHARED_MEMORY.is_dir() or not os.access(spawn.SHARED_MEMORY, os.W_OK),
                               reason="no writable /dev/shm")


def _children(tmp_path: Path) -> spawn.Children:
    problem, candidate = tmp_path / "p.py", tmp_path / "c.py"
    problem.write_text("x = 1\n")
    candidate.write_text("y = 2\n")
    work = tmp_path / "work"
    work.mkdir()
    return spawn.Children(problem, candidate, EvalOptions(), work, "none")


@needs_shm
def test_outputs_go_to_shared_memory_and_are_removed(tmp_path: Path) -> None:
    children = _children(tmp_path)
    assert children.box.outputs == children.box.io
    assert children.use_shared_memory(1 << 20)
    exchange = children.box.outputs
    assert exchange.parent == spawn.SHARED_MEMORY and exchange.is_dir()
    # the candidate's sandbox may write there
    argv = bwrap_argv(children.box, "cpu", [])
    assert ["--bind", str(exchange.resolve()), str(exchange.resolve())] == \
        argv[argv.index(str(exchange.resolve())) - 1:][:3]
    children.close()
    assert not exchange.exists()


@needs_shm
def test_outputs_stay_on_disk_when_shared_memory_is_short(tmp_path: Path) -> None:
    children = _children(tmp_path)
    free = os.statvfs(spawn.SHARED_MEMORY)
    too_big = free.f_bavail * free.f_frsize  # two of these never fit
    assert not children.use_shared_memory(too_big)
    assert children.box.outputs == children.box.io
    folder = children.box.exchange
    children.close()
    assert folder is None or not folder.exists()
