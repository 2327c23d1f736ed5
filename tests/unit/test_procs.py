"""The one child runner: deadline, whole-group kill, output tail (or all of it, for data)."""

from __future__ import annotations

import sys
import time

from kcoder.procs import OUTPUT_TAIL_BYTES, run, spawn_detached


def test_output_is_a_capped_tail_unless_it_is_data(tmp_path):
    script = "import sys; sys.stdout.write('a' * 200000 + 'END')"
    capped = run([sys.executable, "-c", script], 60, tmp_path)
    assert capped.rc == 0 and capped.output.endswith("END") and "bytes cut" in capped.output
    assert len(capped.output) < OUTPUT_TAIL_BYTES + 100
    whole = run([sys.executable, "-c", script], 60, tmp_path, tail_bytes=None)
    assert len(whole.output) == 200003


def test_deadline_kills_the_group(tmp_path):
    marker = tmp_path / "late"
    child = tmp_path / "child.py"
    child.write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w').close()\n")
    parent = tmp_path / "parent.py"
    parent.write_text(f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(child)!r}])\n"
                      "time.sleep(60)\n")
    started = time.monotonic()
    result = run([sys.executable, str(parent)], 1, tmp_path)
    assert result.timed_out and result.rc is None and time.monotonic() - started < 30
    time.sleep(4)
    assert not marker.exists()  # the grandchild died with the group


def test_input_reaches_the_child_and_a_child_that_ignores_it_is_not_blocked(tmp_path):
    upper = run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], 60, tmp_path,
                stdin_text="mangled\nnames")
    assert upper.rc == 0 and upper.output.split() == ["MANGLED", "NAMES"]
    ignored = run([sys.executable, "-c", "print('done')"], 60, tmp_path, stdin_text="x" * 1_000_000)
    assert ignored.rc == 0 and ignored.output.strip() == "done"
    closed = run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], 60, tmp_path)
    assert closed.output.strip() == "''"  # no input: /dev/null, never kcoder's terminal


def test_a_detached_job_runs_in_a_session_of_its_own(tmp_path):
    import os

    out = tmp_path / "sid"
    job = spawn_detached([sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(str(os.getsid(0)))"])
    assert job.wait(timeout=60) == 0
    assert int(out.read_text()) == job.pid != os.getsid(0)  # a session of its own: a group kill here misses it
