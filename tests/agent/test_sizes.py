"""optimize --shapes NAME=SIZES (agent/sizes.py): the sizes parsed, the input named from the
problem's text, and the problem copied with get_inputs() at each size (issue 48 item 3)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from helpers import run_kcoder

from kcoder.agent.sizes import SizeSpec, forward_position, parse_sizes, sized_problem

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, scale):
        return x * y[: x.shape[0]] * scale


def get_inputs():
    return [torch.randn(6, 5), torch.randn(6, 5), torch.randn(5)]


def get_init_inputs():
    return []
'''


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sizes_are_parsed_and_bad_ones_named():
    assert parse_sizes("x=1,257,4096") == SizeSpec("x", (1, 257, 4096))
    assert parse_sizes(" 0=1,8,* ") == SizeSpec("0", (1, 8, None))
    assert parse_sizes("x=1,8,*").text == "x=1,8,*"
    for bad, said in (("x", "NAME=SIZES"), ("x=1,0", "'0' is not a batch size"), ("x=1,1", "each once"),
                      ("x=a", "'a' is not a batch size"), ("=3", "NAME=SIZES")):
        with pytest.raises(ValueError, match=said):
            parse_sizes(bad)


def test_the_named_input_is_read_from_forwards_text(tmp_path):
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM)
    assert forward_position(path, "y") == 1 and forward_position(path, "2") == 2
    with pytest.raises(ValueError, match=r"problem.py: --shapes names 'z', but Model.forward's inputs are x, y, scale"):
        forward_position(path, "z")


def test_the_copied_problem_draws_its_inputs_at_the_size(tmp_path):
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM)
    for rows in (1, 4, 13):
        torch.manual_seed(0)
        first = _load(path).get_inputs()
        torch.manual_seed(0)
        sized = _load(sized_problem(path, parse_sizes(f"x={rows}"), rows, tmp_path / "sizes")).get_inputs()
        # x and y follow the batch (their leading dim is x's); scale (5,) does not
        assert [tuple(t.shape) for t in sized] == [(rows, 5), (rows, 5), (5,)]
        assert torch.equal(sized[0][: min(rows, 6)], first[0][: min(rows, 6)])
        assert torch.equal(sized[2], first[2])
    assert path.read_text() == PROBLEM  # the user's file is never modified


def test_optimize_refuses_a_name_forward_lacks_before_it_measures(tmp_path):
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM)
    proc = run_kcoder("optimize", str(path), "--device", "cpu", "--shapes", "w=1,8", "--runs-dir",
                      str(tmp_path / "runs"))
    assert proc.returncode == 2
    assert "Model.forward's inputs are x, y, scale" in proc.stdout + proc.stderr
    assert "measuring the baselines" not in proc.stdout
