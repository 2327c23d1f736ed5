"""Problem sets and solutions by name: KernelBench levels read where they are, examples-style
folders, the naming rules, and what a suite records for a problem without a solution."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import PROBLEMS, ROOT

from kcoder.settings import Settings
from kcoder.suite.command import SuitePlan, run_suite, settings_fields
from kcoder.suite.problems import SuiteInputError, attach_solutions, collect_problems


def test_kernelbench_level_and_solutions_by_name(tmp_path):
    level = tmp_path / "KernelBench" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in ("1_Square_matmul", "2_ReLU", "3_Softmax"):
        shutil.copyfile(PROBLEMS / "scale_add.py", level / f"{name}.py")
    sols = tmp_path / "sols"
    (sols / "3_Softmax").mkdir(parents=True)
    (sols / "1_Square_matmul.py").write_text("# one\n")
    (sols / "2_ReLU_solution_v2.py").write_text("# two\n")
    (sols / "3_Softmax" / "solution_cpu.py").write_text("# three\n")
    problems = attach_solutions(collect_problems([str(tmp_path / "KernelBench")], level=1), sols, "cpu")
    assert [p.name for p in problems] == ["1_Square_matmul", "2_ReLU", "3_Softmax"]
    assert all(p.path.parent == level for p in problems)  # read in place, never copied
    assert [p.solution.read_text() for p in problems] == ["# one\n", "# two\n", "# three\n"]
    with pytest.raises(SuiteInputError, match="no KernelBench/level2 folder"):
        collect_problems([str(tmp_path / "KernelBench")], level=2)


def test_examples_folder_finds_each_examples_own_solution():
    problems = attach_solutions(collect_problems([str(ROOT / "examples")]), None, "cpu")
    assert [p.name for p in problems] == ["elementwise_chain", "linear_bias_relu", "mse_loss", "softmax_rows"]
    assert all(p.solution == p.path.parent / "solution_cpu.py" for p in problems)


def test_same_name_twice_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    shutil.copyfile(PROBLEMS / "scale_add.py", tmp_path / "a" / "scale_add.py")
    with pytest.raises(SuiteInputError, match="a second problem named 'scale_add'"):
        collect_problems([str(PROBLEMS / "scale_add.py"), str(tmp_path / "a" / "scale_add.py")])


def test_a_problem_without_a_solution_is_recorded_missing(tmp_path):
    shutil.copyfile(PROBLEMS / "scale_add.py", tmp_path / "lonely.py")
    (tmp_path / "sols").mkdir()
    plan = SuitePlan(sources=[str(tmp_path / "lonely.py")], solutions=str(tmp_path / "sols"),
                     settings=settings_fields(Settings(device="cpu")))
    summary = run_suite(plan, tmp_path / "out", backend="pool")
    assert summary["problems"] == 1 and summary["compiled"] == 0 and summary["statuses"] == {"missing": 1}
    record = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    assert record["status"] == "missing" and record["reason"] == "no solution file matched this problem"
