"""The captured graph is data (issue 37): the capture child runs the problem file, so what it
writes is checked against policy/schema.py before the optimize process reads it, forward's
generated steps are interpreted (policy/interpret.py), never exec'd, and the child sees no
credentials. No extension is built here: each test is one capture child at most."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kcoder.policy.capture import CaptureError, capture_graph
from kcoder.policy.interpret import StepError, run_steps
from kcoder.policy.schema import GraphSchemaError, validate_graph

# A problem file that, imported by the capture child, writes its own "graph" and ends the child
# with success: what a hostile problem (an MCP client's) can hand kcoder.
FORGER = '''import json, os, sys
import torch

GRAPH = {graph}
with open(sys.argv[2], "w") as fh:
    json.dump(GRAPH, fh)
os._exit(0)


class Model(torch.nn.Module):
    def forward(self, x):
        return x.unsqueeze(1)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def _graph(marker: Path, *, name: str = "unsqueeze", dim: object = 1) -> dict:
    """forward(x) = x.unsqueeze(dim) as capture.py writes it (x: 4 x 8), with the output node
    called `name`."""
    return {"nodes": [
        {"name": "arg0_1", "op": "placeholder", "role": "input", "key": 0, "stride": [8, 1], "shape": [4, 8],
         "dtype": "torch.float32"},
        {"name": name, "op": "aten.unsqueeze.default", "args": [{"ref": "arg0_1"}, dim], "kwargs": {},
         "shape": [4, 1, 8], "dtype": "torch.float32"}],
        "outputs": [{"ref": name}], "n_forward_args": 1}


def _payload(marker: Path) -> str:
    # Valid Python wherever the planner pastes a view's dim (`t_v = inputs[0].unsqueeze(DIM)`):
    # an exec of forward's steps would create the marker and go on as if nothing happened.
    return f"1) if __import__('os').system('touch {marker}') else inputs[0].unsqueeze(1"


def test_the_plain_graph_is_valid(tmp_path):
    """The contrast: the same graph without the payloads passes, so the refusals below are the
    payloads' doing."""
    assert validate_graph(_graph(tmp_path / "marker"))


@pytest.mark.parametrize("field", ["dim", "name"])
def test_code_in_a_captured_graph_is_refused_and_never_run(tmp_path, field):
    """A problem file hands the capture a graph with code in a view's argument or in a node's
    name (`x); __import__('os')...`): the policy refuses it naming the problem and the graph file,
    and the code never runs (the cuda target's rendering ran forward's steps in the optimize
    process)."""
    from kcoder.policy.driver import generate
    from kcoder.settings import Settings

    marker = tmp_path / "pwned"
    if field == "dim":
        graph = _graph(marker, dim=_payload(marker))
    else:
        graph = _graph(marker, name=f"x); __import__('os').system('touch {marker}'); (")
    problem = tmp_path / "forger.py"
    problem.write_text(FORGER.format(graph=repr(graph)))
    generated = generate(problem, Settings(device="cuda"), tmp_path / "work")
    assert generated.source is None
    assert f"{problem}: the captured graph graph.json is refused" in generated.error, generated.error
    assert ("is not a valid name here" in generated.error), generated.error
    assert not marker.exists(), "code from the captured graph ran"


def test_schema_names_the_field_and_the_problem():
    graph = _graph(Path("/nonexistent"))
    graph["nodes"][1]["op"] = "aten.no_such_op.default"
    with pytest.raises(GraphSchemaError, match=r"nodes\[1\] \(unsqueeze\)\.op: 'aten\.no_such_op\.default' is not"):
        validate_graph(graph)
    graph = _graph(Path("/nonexistent"))
    graph["nodes"][0]["shape"] = [4, "8"]
    with pytest.raises(GraphSchemaError, match=r"nodes\[0\] \(arg0_1\)\.shape: a list of integers expected"):
        validate_graph(graph)
    graph = _graph(Path("/nonexistent"))
    graph["outputs"] = [{"ref": "later"}]
    with pytest.raises(GraphSchemaError, match=r"outputs\[0\]\.ref: 'later' names no earlier node"):
        validate_graph(graph)


def test_forward_steps_are_interpreted_not_executed(tmp_path):
    """The second layer, should text with code ever reach the geometry step: the interpreter
    carries out only allocation, views and kernel calls."""
    import torch

    marker = tmp_path / "pwned"
    scope = {"_dev": torch.device("meta"), "inputs": [torch.empty(4, 8, device="meta")]}
    calls = []

    class Kernels:
        def __getattr__(self, name):
            return lambda tensors: calls.append((name, [tuple(t.shape) for t in tensors]))

    names = run_steps(["t_a = inputs[0].unsqueeze(1).expand(4, 3, 8)",
                       "t_b = torch.empty((4, 3, 8), dtype=torch.float32, device=_dev)",
                       "_ext.k0([t_a, t_b])"], scope, None, Kernels())
    assert calls == [("k0", [(4, 3, 8), (4, 3, 8)])] and names["t_b"].is_meta
    for step in [f"t_c = inputs[0].unsqueeze(1) if __import__('os').system('touch {marker}') else inputs[0]",
                 f"t_c = __import__('os').system('touch {marker}')",
                 f"t_c = torch.ops.aten.sym_size(inputs[0], 0) or open('{marker}', 'w')",
                 "t_c = inputs[0].__class__"]:
        with pytest.raises(StepError, match="generated step not understood"):
            run_steps([step], scope, None, Kernels())
    assert not marker.exists()


SPY = '''import os
import torch

with open({seen!r}, "w") as fh:
    fh.write(repr((os.environ.get("FAKE_API_KEY"), os.environ.get("HOME"))))


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def test_the_capture_child_sees_no_credentials(tmp_path, monkeypatch):
    """The user's own problem is traced with the scrubbed environment: no planted key, and a
    private HOME (not the user's)."""
    monkeypatch.setenv("FAKE_API_KEY", "sk-fake-0123456789abcdef")
    seen = tmp_path / "seen.txt"
    problem = tmp_path / "spy.py"
    problem.write_text(SPY.format(seen=str(seen)))
    graph = capture_graph(problem, tmp_path / "work")
    assert [n["op"] for n in graph["nodes"]] == ["placeholder", "aten.relu.default"]
    key, home = eval(seen.read_text())  # noqa: S307  the test's own file
    assert key is None
    assert home and Path(home) != Path(os.environ["HOME"]) and "kcoder-capture-" in home
    batches = graph.pop("batches")  # the same module traced at other batch sizes (batchdims.py)
    assert batches["sizes"] == [4, 3, 5] and len(batches["graphs"]) == 2
    assert json.loads((tmp_path / "work" / "graph.json").read_text()) == graph
    assert json.loads((tmp_path / "work" / "batches.json").read_text()) == batches


def test_a_link_in_place_of_the_graph_is_not_followed(tmp_path):
    """The child could leave a link where its graph should be (to a file of the user's): read
    without following it."""
    secret = tmp_path / "users-file.json"
    secret.write_text(json.dumps(_graph(tmp_path / "marker")))
    problem = tmp_path / "linker.py"
    problem.write_text(f"import os, sys\nos.symlink({str(secret)!r}, sys.argv[2])\nos._exit(0)\n")
    with pytest.raises(CaptureError, match=r"linker\.py: the captured graph graph\.json is refused: it could not be"):
        capture_graph(problem, tmp_path / "work")
