"""Issue 48: the built-in policy's candidates take the batch at run time (batchdims.py).

A candidate whose text is the same at every traced batch size reads B from its first input;
one that is not (a mean's 1/N over the batch) is made for the problem's shapes and its forward
names them when called at another."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from kcoder.policy.batchdims import BatchScalar, Dim, annotate, shape_py
from kcoder.policy.driver import generate
from kcoder.policy.nodes import Graph, Node
from kcoder.settings import Settings

ROOT = Path(__file__).parents[2]
PROBLEMS = Path(__file__).parent / "problems"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _candidate(problem: Path, tmp_path: Path, monkeypatch, build: bool = True):
    """The policy's cpu candidate for `problem`, imported (built through kcoder's shared build
    cache, as the evaluator builds it; build=False: load_inline answers nothing)."""
    import torch.utils.cpp_extension as ext

    from kcoder.build.inline import make_load_inline

    generated = generate(problem, Settings(device="cpu", allow=["gemm"]), tmp_path / "work")
    assert generated.source is not None, generated.error
    path = tmp_path / f"cand_{problem.parent.name}_{problem.stem}.py"
    path.write_text(generated.source)
    monkeypatch.setattr(ext, "load_inline", make_load_inline(ext.load_inline) if build else lambda **kw: None)
    return generated.source, _module(path, path.stem)


@pytest.mark.slow
# Two small problems (each candidate is a build; the 4096-row examples cost a minute more): a scan, and
# reductions whose means divide by the batch at run time. softmax_rows's candidate is judged at the drawn
# sizes by test_policy_cpu's optimize run (--shapes strict is optimize's default).
@pytest.mark.parametrize("problem", ["tests/policy/problems/scans.py", "tests/policy/problems/reductions.py"])
def test_the_candidate_is_right_at_drawn_batch_sizes(problem, tmp_path, monkeypatch):
    source, cand = _candidate(ROOT / problem, tmp_path, monkeypatch)
    assert "  const int64_t B = in[0].size(0);\n" in source and "Made for any batch size" in source
    ref = _module(ROOT / problem, f"ref_{Path(problem).parent.name}_{Path(problem).stem}")
    torch.manual_seed(0)
    model = ref.Model(*ref.get_init_inputs())
    new = cand.ModelNew(*ref.get_init_inputs())
    new.load_state_dict(model.state_dict())
    base = ref.get_inputs()
    batch = base[0].shape[0]
    for b in (1, 7, batch // 2, 2 * batch):  # 1, a prime, half, double
        inputs = [_rows(x, b) if x.shape[0] == batch else x for x in base]
        with torch.no_grad():
            got, want = new(*inputs), model(*inputs)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, b=b: f"batch {b}: {m}")
    # forward's C++ (native_forward.py) names the dims it was made for at any other shape
    other = torch.zeros(*base[0].shape[:-1], base[0].shape[-1] + 1)
    with pytest.raises(ValueError, match=r"made for inputs\[0\] of shape \[\*, .*\]; got \[" + str(batch)):
        new(other, *base[1:])


def _rows(x: torch.Tensor, b: int) -> torch.Tensor:
    """b rows drawn from x's (values of the problem's own kind: a mask stays a mask)."""
    rows = x[torch.randint(0, x.shape[0], (b,))]
    return rows * (0.5 + torch.rand(b, *[1] * (x.dim() - 1))) if x.is_floating_point() else rows


SCALED_BY_BATCH = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * x.shape[0]


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
"""


def test_a_candidate_made_for_its_shapes_names_them_at_another(tmp_path, monkeypatch):
    """A constant that follows the batch in no way the policy writes (here the batch itself, as a
    factor): the kernel is made for 64 x 32, and forward says so at another size."""
    problem = tmp_path / "scaled_by_batch.py"
    problem.write_text(SCALED_BY_BATCH)
    source, _ = _candidate(problem, tmp_path, monkeypatch, build=False)
    assert "int64_t B =" not in source and "MADE_FOR = [(0, (64, 32))]" in source
    assert "  kc_check_shape(in[0], 0, {64, 32});\n" in source  # forward's C++ checks the whole shape


def test_a_mean_over_the_batch_divides_by_the_batch_at_run_time(tmp_path, monkeypatch):
    """mse_loss's 1/N (N = B * 4096) is computed by the C++ from the B forward sets."""
    source, _ = _candidate(ROOT / "examples/mse_loss/model.py", tmp_path, monkeypatch, build=False)
    assert "Made for any batch size" in source and "  kc_batch_set(B);" in source
    assert "(v_mean__sum * ((float)(1.0 / (double)(kc_batch * 4096))))" in source


def _graph(*shapes: tuple[int, ...]) -> Graph:
    nodes = {f"n{i}": Node(f"n{i}", "pw", "relu", [], s, "torch.float32") for i, s in enumerate(shapes)}
    return Graph(nodes, [], 1)


def test_dims_that_follow_the_batch_are_written_as_its_expressions():
    graphs = [_graph((64, 8), (128, 3), (64,)), _graph((3, 8), (6, 3), (3,)), _graph((5, 8), (10, 3), (5,))]
    assert annotate(graphs, [64, 3, 5])
    first = graphs[0].nodes
    assert [shape_py(first[n].shape) for n in first] == ["(B, 8)", "(B * 2, 3)", "(B,)"]
    assert isinstance(first["n0"].shape[0], Dim) and first["n0"].shape == (64, 8)  # still the traced ints
    # a dim that changes but not in proportion to the batch (B + 1): no expression, so none at all
    assert not annotate([_graph((65, 8)), _graph((4, 8)), _graph((6, 8))], [64, 3, 5])
    assert not annotate([_graph((64, 8)), _graph((3, 8), (1,))], [64, 3])  # other nodes


def _scaled(*values: float) -> list[Graph]:
    return [Graph({"m": Node("m", "pw", "mul", ["x", v], (4,), "torch.float32")}, [], 1) for v in values]


def test_constants_that_follow_the_batch_become_run_time_expressions():
    sizes = [64, 3, 5]
    graphs = _scaled(*(1.0 / (8 * b) for b in sizes))  # a mean over the batch and a dim of 8
    assert annotate(graphs, sizes, scalars=True)
    scale = graphs[0].nodes["m"].args[1]
    assert isinstance(scale, BatchScalar) and scale == 1.0 / 512
    assert scale.cexpr == "((float)(1.0 / (double)(kc_batch * 8)))"
    graphs = _scaled(*(1.0 / (8 * b - 1) for b in sizes))  # a variance's 1/(N - 1)
    assert annotate(graphs, sizes, scalars=True)
    assert graphs[1].nodes["m"].args[1].cexpr == "((float)(1.0 / (double)(kc_batch * 8 - 1)))"
    assert not annotate(_scaled(*(0.5 * b for b in sizes)), sizes, scalars=True)  # B / 2: no expression
    assert annotate(_scaled(*(0.5 * b for b in sizes)), sizes)  # scalars=False: floats not compared


@pytest.mark.parametrize("problem", ["tests/policy/problems/reductions.py"])
def test_cuda_candidates_render_after_the_batch_traces(problem, tmp_path):
    """The CUDA renderer runs forward's steps on meta tensors (geometry.py) for every traced batch
    size; steps written in B must be understood there, and a kernel with its shapes baked in is
    then made for the problem's shapes (3f4adea rendered no CUDA candidate at all)."""
    generated = generate(ROOT / problem, Settings(device="cuda", allow=["gemm"]), tmp_path / "work")
    assert generated.source is not None, generated.error
    assert "__global__" in generated.source and "Made for any batch size" not in generated.source
    assert "MADE_FOR = [(0, (" in generated.source and "B = inputs" not in generated.source
