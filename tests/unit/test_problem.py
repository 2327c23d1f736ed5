"""Malformed problem and candidate files: clear errors naming the file, exit code 2."""

import pytest
from helpers import PROBLEMS, run_json, run_kcoder

from kcoder.problem import ProblemError, load_problem

GOOD_PROBLEM = (PROBLEMS / "scale_add.py").read_text()


@pytest.mark.parametrize("text, expected", [
    ("class Model(:\n", "syntax error"),
    ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "class `Model"),
    ("import torch\nclass Model(torch.nn.Module): pass\ndef get_init_inputs(): return []\n", "get_inputs"),
])
def test_malformed_problem_names_file_and_cause(tmp_path, text, expected):
    path = tmp_path / "bad_problem.py"
    path.write_text(text)
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    assert str(path) in str(info.value) and expected in str(info.value)
    proc = run_kcoder("eval", str(path), str(path), "--device", "cpu")
    assert proc.returncode == 2
    assert expected in proc.stderr and "Traceback" not in proc.stderr + proc.stdout


def test_problem_with_non_tensor_inputs_is_bad_input(tmp_path):
    path = tmp_path / "dict_inputs.py"
    path.write_text(GOOD_PROBLEM.replace("return [torch.randn(512, 1024), torch.randn(512, 1024)]",
                                         "return [{'x': 1}]"))
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, s):\n"
                    "        super().__init__()\n    def forward(self, x, y):\n        return x\n")
    code, payload = run_json("eval", str(path), str(cand), "--device", "cpu")
    assert code == 2
    assert "inputs must be tensors or scalars" in payload["error"] and "dict_inputs.py" in payload["error"]


def test_candidate_without_modelnew_is_a_failed_candidate(tmp_path):
    cand = tmp_path / "nothing.py"
    cand.write_text("x = 1\n")
    code, verdict = run_json("eval", str(PROBLEMS / "scale_add.py"), str(cand), "--device", "cpu")
    assert code == 1 and verdict["reward"] == -1
    assert "nothing.py" in verdict["reason"] and "ModelNew" in verdict["reason"]


def test_missing_file_and_bad_option():
    proc = run_kcoder("eval", "no/such/problem.py", "x.py", "--device", "cpu")
    assert proc.returncode == 2 and "no/such/problem.py" in proc.stderr
    proc = run_kcoder("eval", str(PROBLEMS / "scale_add.py"), str(PROBLEMS / "scale_add.py"),
                      "--device", "tpu")
    assert proc.returncode == 2 and "device" in proc.stderr


def test_help_does_not_import_torch_or_litellm():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kcoder", "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "eval" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
    assert "torch" not in imported and "litellm" not in imported
