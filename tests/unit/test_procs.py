"""The one child runner: deadline, whole-group kill, output tail (or all of it, for data)."""

from __future__ import annotations

import sys

from kcoder.procs import OUTPUT_TAIL_BYTES, run


def test_output_is_a_capped_tail_unless_it_is_data(tmp_path):
    script = "import sys; sys.stdout.write('a' * 200000 + 'END')"
    capped = run([sys.executable, "-c", script], 60, tmp_path)
    assert capped.rc == 0 and capped.output.endswith("END") and "bytes cut" in capped.output
    assert len(capped.output) < OUTPUT_TAIL_BYTES + 100
    whole = run([sys.executable, "-c", script], 60, tmp_path, tail_bytes=None)
    assert len(whole.output) == 200003


def test_deadline_kills_the_group(tmp_path):
    marker = tmp_path / "late"
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(3); open({str(marker)!r}, \"w\")']); time.sleep(60)")
    result = run([sys.executable, "-c", script], 1, tmp_path)
    assert result.timed_out and result.rc is None
    import time

    time.sleep(4)
    assert not marker.exists()  # the grandchild died with the group
