"""Detached build jobs (build/detached.py): a job that fails is recorded, a job that was killed
is not (until it has been killed KILLS_BEFORE_FAILED times), so a kill never disables the .gch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kcoder.build import detached


def _run_job(tmp_path: Path, body: str) -> tuple[Path, Path]:
    failed, marker, scratch = tmp_path / "failed", tmp_path / "building", tmp_path / "scratch"
    marker.write_text("0")
    scratch.write_text("partial")
    subprocess.run(["sh", "-c", detached.job_script(body, tmp_path / "log", failed, marker, (scratch,))],
                   check=True, timeout=30)
    assert not marker.exists() and not scratch.exists()  # the job's leftovers are gone either way
    return failed, detached.kills_file(failed)


def test_a_compile_error_is_recorded_as_a_failure_with_its_log(tmp_path):
    failed, kills = _run_job(tmp_path, "echo 'x.h:1:2: error: expected ;' >&2; exit 1")
    assert "error: expected ;" in failed.read_text()
    assert not kills.exists()


def test_a_command_that_cannot_run_is_a_failure_not_a_kill(tmp_path):
    failed, kills = _run_job(tmp_path, "/nonexistent/g++ -c x.cpp")  # the shell's 127
    assert failed.exists() and not kills.exists()


def test_a_success_records_nothing(tmp_path):
    failed, kills = _run_job(tmp_path, "echo built")
    assert not failed.exists() and not kills.exists()
    assert (tmp_path / "log").read_text() == "built\n"


def test_a_killed_compiler_is_not_a_failure_until_it_has_been_killed_three_times(tmp_path):
    # gcc's driver exits 1 when its cc1plus is killed (out of memory, an evaluation ending):
    # the text tells it from a compile error. A shell killed by a signal exits 128+N.
    bodies = ["echo 'g++: fatal error: Killed signal terminated program cc1plus' >&2; exit 1",
              "sh -c 'kill -KILL $$'", "exit 124"]
    for done, body in enumerate(bodies, 1):
        failed, kills = _run_job(tmp_path, body)
        assert len(kills.read_text().split()) == done
        assert failed.exists() == (done == detached.KILLS_BEFORE_FAILED), done
