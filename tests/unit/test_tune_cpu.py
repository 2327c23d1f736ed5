"""`kcoder tune` end to end on the cpu target, with real builds and the real judge.

The candidate (tests/sources.py tunable_candidate) builds TESTLIB_CPP with the suite's own flags, so
every point reuses the one extension build the rest of the suite makes (fast and plain).
Space: KERNEL x CHUNK = 6 points, CHUNK 4 refused by a constraint, the no_relu kernel wrong:
2 valid points.
"""

from __future__ import annotations

import json

import pytest
from helpers import PROBLEMS, run_kcoder
from sources import tunable_candidate

pytestmark = pytest.mark.slow



def test_tune_searches_rejects_invalid_points_and_caches(tmp_path):
    TUNABLE = tunable_candidate()
    candidate = tmp_path / "cand.py"
    candidate.write_text(TUNABLE)
    args = ["tune", str(PROBLEMS / "scale_add.py"), str(candidate), "--device", "cpu", "--no-compile",
            "--budget", "0.3", "--strategy", "exhaustive"]
    proc = run_kcoder(*args, "--json", "--out-dir", str(tmp_path / "first"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    points = report["points"]
    assert sorted(p["config"]["CHUNK"] for p in points if p["status"] == "constraint") == [4, 4]
    wrong = [p for p in points if p["config"]["KERNEL"] == "no_relu" and p["status"] != "constraint"]
    assert len(wrong) == 2 and all(p["status"] == "incorrect" and p["reason"].startswith("wrong answer")
                                   for p in wrong)
    assert any(p["status"] == "ok" for p in points)  # both relu points, unless a busy host fails one
    assert report["best"]["config"]["KERNEL"] == "relu" and report["hand_picked"]["status"] == "incorrect"
    # the tuned file: the candidate with only its CONFIG literal changed, verified as plain load_inline
    tuned = (tmp_path / "first" / "cand_tuned.py").read_text()
    config = report["best"]["config"]
    assert tuned == TUNABLE.replace('CONFIG = {"KERNEL": "no_relu", "CHUNK": 2}',
                                    f'CONFIG = {{"KERNEL": "relu", "CHUNK": {config["CHUNK"]}}}')
    assert report["final"]["correct"] and report["final"]["plain_build"] == "verified"
    assert candidate.read_text() == TUNABLE  # the user's file is only read
    assert (tmp_path / "first" / "tune.png").stat().st_size > 0
    assert "| KERNEL=relu" in (tmp_path / "first" / "table.md").read_text()
    # again: every point and the final check come from the cache; nothing is judged
    proc = run_kcoder(*args, "--json", "--out-dir", str(tmp_path / "second"), "--out", str(tmp_path / "best.py"))
    again = json.loads(proc.stdout)
    assert proc.returncode == 0 and again["evaluated"] == 0 and again["final"]["cached"]
    assert again["best"]["config"] == config and again["seconds"] < 5
    assert (tmp_path / "best.py").read_text() == tuned
