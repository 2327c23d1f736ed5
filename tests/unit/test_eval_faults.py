"""Whose fault is it? Problem faults are bad input (exit 2, one line naming the file); the
candidate's faults are verdicts (exit 1, reward -1) with a reason that points at the cause."""

from __future__ import annotations

from helpers import PROBLEMS, fast_options, run_json, run_kcoder
from sources import candidate_source

from kcoder.evaluate import evaluate

HONEST = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")

PROBLEM_INIT_RAISES = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        raise ValueError("scale must be positive")

    def forward(self, x, y):
        return x


def get_inputs():
    return [torch.randn(4, 4), torch.randn(4, 4)]


def get_init_inputs():
    return [2.0]
'''


def _project(tmp_path, problem_text: str, candidate_text: str = HONEST):
    proj = tmp_path / "proj"
    proj.mkdir()
    problem = proj / "model.py"
    problem.write_text(problem_text)
    candidate = proj / "model_new.py"
    candidate.write_text(candidate_text)
    return problem, candidate


def test_problem_init_that_raises_is_bad_input_in_one_line(tmp_path):
    problem, candidate = _project(tmp_path, PROBLEM_INIT_RAISES)
    proc = run_kcoder("eval", str(problem), str(candidate), "--device", "cpu")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert str(problem) in lines[0] and "ValueError: scale must be positive" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_problem_forward_that_raises_is_bad_input(tmp_path):
    text = PROBLEM_INIT_RAISES.replace('        raise ValueError("scale must be positive")\n', "").replace(
        "        return x\n", '        raise RuntimeError("reference forward is broken")\n')
    problem, candidate = _project(tmp_path, text)
    code, report = run_json("eval", str(problem), str(candidate), "--device", "cpu")
    assert code == 2
    assert str(problem) in report["error"] and "reference forward is broken" in report["error"]


def test_init_hang_has_its_own_limit(write_candidate):
    source = candidate_source("return _ext.scale_add_relu(x, y, self.scale)", init="import time\ntime.sleep(1000)")
    verdict = evaluate(PROBLEMS / "scale_add.py", write_candidate(source),
                       fast_options(stop_after="build", init_timeout_s=3))
    assert verdict.reward == -1 and verdict.stage == "build"
    assert verdict.reason.startswith("timeout: ModelNew(*get_init_inputs()) exceeded its 3 s limit"), verdict.reason
    assert verdict.seconds.get("build") is None or verdict.seconds["build"] < 60


def test_no_bytecode_beside_the_users_files(tmp_path):
    problem, candidate = _project(tmp_path, (PROBLEMS / "scale_add.py").read_text())
    verdict = evaluate(problem, candidate, fast_options(stop_after="verify"))
    assert verdict.correct, verdict.reason
    assert sorted(p.name for p in problem.parent.iterdir()) == ["model.py", "model_new.py"]


def test_a_flood_of_output_is_capped_in_the_verdict(write_candidate):
    source = candidate_source("print('x' * 10_000_000)\n_ext.abort_now()\nreturn x")
    verdict = evaluate(PROBLEMS / "scale_add.py", write_candidate(source), fast_options(stop_after="verify"))
    assert verdict.reward == -1 and "abort (SIGABRT)" in verdict.reason, verdict.reason
    assert len(verdict.log) <= 4000 and len(verdict.reason) <= 300
    assert len(verdict.to_json()) < 20_000
