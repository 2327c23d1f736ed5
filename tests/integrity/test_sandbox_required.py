"""`--sandbox bwrap` is a requirement, never a wish (issue 37): where bwrap cannot run, every
command that would run code kcoder did not write stops with exit 2 and says why, before that
code runs; it never falls back to running it unconfined. A fake `bwrap` first on PATH (it exits
1, as a bwrap without user namespaces does) stands for the unusable one. The problem file leaves
a marker when imported, so a step that ran it anyway would show."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import PROBLEMS, run_kcoder

from kcoder.evaluate import sandbox

MESSAGE = "--sandbox bwrap: bwrap cannot create namespaces here"


@pytest.fixture
def broken_bwrap(tmp_path, monkeypatch):
    """PATH with a `bwrap` that fails first; a problem that marks its import. Yields the
    environment for a CLI run, the problem file and the marker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    marker = tmp_path / "imported"
    problem = tmp_path / "problem.py"
    problem.write_text(f"open({str(marker)!r}, 'w').close()\n" + (PROBLEMS / "scale_add.py").read_text())
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    sandbox.bwrap_usable.cache_clear()
    yield {"PATH": path}, problem, marker
    sandbox.bwrap_usable.cache_clear()


def _assert_refused(proc, marker: Path) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert MESSAGE in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not marker.exists(), "the problem ran although the sandbox it needed could not"


def test_eval_stops_with_exit_2(broken_bwrap, tmp_path):
    env, problem, marker = broken_bwrap
    candidate = tmp_path / "model_new.py"
    candidate.write_text("import torch\n")
    _assert_refused(run_kcoder("eval", str(problem), str(candidate), "--device", "cpu", "--sandbox", "bwrap",
                               env=env), marker)


def test_optimize_stops_with_exit_2_before_the_capture(broken_bwrap, tmp_path):
    env, problem, marker = broken_bwrap
    runs = tmp_path / "runs"
    proc = run_kcoder("optimize", str(problem), "--device", "cpu", "--sandbox", "bwrap", "--runs-dir", str(runs),
                      env={**env, "KCODER_CONFINE_PROBLEM": "1"})
    _assert_refused(proc, marker)
    assert not runs.exists() or not any(runs.iterdir()), "a run directory was made"


def test_the_capture_itself_refuses_to_run_unconfined(broken_bwrap, tmp_path, monkeypatch):
    """The capture step on its own (as an embedder or the MCP server's optimize job calls it):
    an MCP client's problem under --sandbox bwrap is not traced without bwrap."""
    from kcoder.evaluate.options import CONFINE_PROBLEM_ENV
    from kcoder.policy.capture import capture_graph

    _env, problem, marker = broken_bwrap
    monkeypatch.setenv(CONFINE_PROBLEM_ENV, "1")
    with pytest.raises(ValueError, match=MESSAGE):
        capture_graph(problem, tmp_path / "work", sandbox="bwrap")
    assert not marker.exists()


def test_the_ptxas_recompile_refuses_to_run_unconfined(broken_bwrap, tmp_path):
    from kcoder.profile.ptxas import compile_report

    _env, _problem, marker = broken_bwrap
    build = tmp_path / "build"
    build.mkdir()
    nvcc = build / "nvcc.sh"
    nvcc.write_text(f"#!/bin/sh\ntouch {marker}\n")
    nvcc.chmod(0o755)
    (build / "cuda.cu").write_text("// nothing\n")
    (build / "build.ninja").write_text(f"nvcc = {nvcc}\ncuda_cflags = -O2\n"
                                       f"build cuda.cuda.o: cuda_compile {build / 'cuda.cu'}\n")
    with pytest.raises(ValueError, match=MESSAGE):
        compile_report(build, 60.0, sandbox="bwrap")
    assert not marker.exists()
