"""bench/kbslice.py, the choice of the next slice of KernelBench for a device call (device_session.sh
kbsuite): what to render (the numbers asked for, less what this commit already judged), then what
to judge (only problems with a candidate, none over --max-mb, none the results file has done for
this candidate, commit and device, smallest footprint first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT

from kcoder.hostinfo import cpu_model
from kcoder.settings import Settings
from kcoder.suite import ledger
from kcoder.suite.command import settings_fields


def test_next_slice_is_small_first_and_skips_what_is_done(tmp_path):
    kb, sols = tmp_path / "kb", tmp_path / "sols"
    (kb / "level1").mkdir(parents=True)
    sols.mkdir()
    sizes = {"1_Matmul": None, "2_ReLU": 900.0, "3_Softmax": 50.0, "4_Norm": 20.0, "5_Loss": 5.0, "6_Big": 9000.0,
             "40_Out_of_range": 1.0}
    for name, mb in sizes.items():
        (kb / "level1" / f"{name}.py").write_text("# problem\n")
        if mb is not None:  # 1_Matmul: library calls only, nothing rendered
            (sols / f"{name}.py").write_text(f"# candidate for {name}\n")
    (sols / "footprints.json").write_text(json.dumps({k: v for k, v in sizes.items() if v is not None}))
    options = ledger.options_of(settings_fields(Settings(device="cpu", allow=["gemm", "conv"])))
    done = {"name": "5_Loss", "problem_sha256": ledger.sha256("# problem\n"),
            "candidate_sha256": ledger.sha256("# candidate for 5_Loss\n"), "commit": "c0ffee",
            "device_name": cpu_model(), "options": options, "status": "accepted"}
    stale = {**done, "name": "3_Softmax", "commit": "older"}  # another commit: runs again
    results = tmp_path / "kernelbench-h100.jsonl"
    results.write_text(json.dumps(done) + "\n" + json.dumps(stale) + "\n")
    def kbslice(*args: str, commit: str = "c0ffee") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "bench" / "kbslice.py"), str(kb), "--level", "1",
                               "--results", str(results), "--to", "30", "--skip", "2", "--device", "cpu", *args],
                              capture_output=True, text=True, timeout=300, env={**os.environ, "KCODER_COMMIT": commit})

    # What to render: the slice (1..30 less 2) less what this commit judged (5_Loss, whatever its candidate).
    proc = kbslice("--to-render")
    assert proc.returncode == 0, proc.stderr
    assert [line.rsplit("/", 1)[1] for line in proc.stdout.split()] == ["1_Matmul.py", "3_Softmax.py", "4_Norm.py",
                                                                         "6_Big.py"]
    assert "5 in the slice, 1 judged at this commit" in proc.stderr
    assert len(kbslice("--to-render", commit="c0ffee+dirty").stdout.split()) == 5  # a dirty tree: render them all

    # What to judge next, of the rendered candidates.
    proc = kbslice("--solutions", str(sols), "--max-mb", "5000", "-n", "2")
    assert proc.returncode == 0, proc.stderr
    level = kb / "level1"
    assert proc.stdout.splitlines() == [f"1 20.0 {level / '4_Norm.py'}", f"1 50.0 {level / '3_Softmax.py'}"]
    assert "4 covered in the slice, 1 over --max-mb, 1 already in kernelbench-h100.jsonl (c0ffee" in proc.stderr
    assert "2 to run, taking 2" in proc.stderr
