"""bench/results_table.py: the README's tables from a small results log (rows as `kcoder suite
--results` writes them): the latest row per problem, one device, figures per level."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT

H100, H200 = "NVIDIA H100 80GB HBM3, sm_90", "NVIDIA H200, sm_90"


def row(name: str, level: int, vs_eager: float | None, vs_compile: float | None, device: str = H100,
        commit: str = "aaaa1111", status: str = "accepted", reason: str = "") -> dict:
    correct = status == "accepted"
    return {"name": name, "level": level, "problem": f"level{level}/{name}.py", "candidate_sha256": "c" * 64,
            "commit": commit, "device": "cuda", "device_name": device, "torch_version": "2.11.0+cu130",
            "options": {"precision": "strict", "stop_after": "timing", "allow": ["conv", "gemm"], "budget": 1.0},
            "date": "2026-12-06 10:00", "status": status, "reason": reason, "correct": correct,
            "compiled": True, "eager_us": 100.0 if correct else None,
            "compile_us": 100.0 * vs_compile / vs_eager if correct else None,
            "candidate_us": 100.0 / vs_eager if correct else None,
            "speedup_vs_eager": vs_eager, "speedup_vs_compile": vs_compile,
            "candidate_sol_fraction": 0.9 if correct else None, "compile_sol_fraction": 0.6 if correct else None}


def table(tmp_path, rows: list[dict], *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "kernelbench-h100.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"name": "cut by a kill", "cand')
    # from another folder: the script takes the formats of its own checkout's kcoder/suite/report.py
    return subprocess.run([sys.executable, str(ROOT / "bench" / "results_table.py"), str(path), *args],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_levels_and_problems_from_the_latest_rows(tmp_path):
    rows = [row("19_ReLU", 1, 1.5, 0.80, commit="old00000"),
            row("19_ReLU", 1, 2.0, 2.00),  # the same problem measured again later: this row counts
            row("23_Softmax", 1, 1.2, 0.50),
            row("40_LayerNorm", 1, None, None, status="rejected", reason="wrong answer on input set 1 of 5"),
            row("1_Conv2D_ReLU_BiasAdd", 2, 1.10, 1.07),
            row("2_Other", 2, 4.0, 4.0, device=H200)]  # another card: not in the H100's table
    proc = table(tmp_path, rows)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Judge's verdicts (`kcoder suite --results`, kernelbench-h100.jsonl): " + H100)
    assert "kcoder aaaa1111 (4), old00000 (1)" not in out and "aaaa1111 (4)" in out  # 4 latest rows, one commit
    # level 1: 3 problems, 2 verified; geomean vs compile sqrt(2.0 * 0.5) = 1.00, vs eager sqrt(2.0 * 1.2)
    assert "| 1 | 3 | 2 (67%) | 2 (67%) | 1.55x | 1.00x | 1 (33%) | 90 / 60 |" in out
    assert "| 2 | 1 | 1 (100%) | 1 (100%) | 1.10x | 1.07x | 1 (100%) | 90 / 60 |" in out
    lines = [line for line in out.splitlines() if line.startswith("| 1 | ") or line.startswith("| 2 | ")]
    assert [line.split(" | ")[1] for line in lines[2:]] == ["19_ReLU", "23_Softmax", "40_LayerNorm",
                                                           "1_Conv2D_ReLU_BiasAdd"]  # by level, then number
    assert "| 1 | 19_ReLU | accepted | 100.0 | 100.0 | 50.0 | 2.00x | 2.00x | 90 | 60 |" in out
    assert "| 1 | 40_LayerNorm | rejected: wrong answer on input set 1 of 5 | - |" in out
    assert "2_Other" not in out

    h200 = table(tmp_path, rows, "--device", "H200").stdout
    assert "| 2 | 1 | 1 (100%) | 1 (100%) | 4.00x | 4.00x |" in h200 and "19_ReLU" not in h200
    old = table(tmp_path, rows, "--commit", "old").stdout
    assert "| 1 | 19_ReLU | accepted | 100.0 | 53.3 | 66.7 | 1.50x | 0.80x |" in old


def test_a_missing_or_empty_file_is_named(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "results_table.py"), str(tmp_path / "none.jsonl")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "none.jsonl: cannot read the results file" in proc.stderr
    proc = table(tmp_path, [])
    assert proc.returncode != 0 and "kernelbench-h100.jsonl: no results rows" in proc.stderr
