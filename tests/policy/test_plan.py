"""Capture and planning without builds: which kernels a module becomes, and that forward only
allocates, takes views and calls kernels (the evaluator refuses torch compute there)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kcoder.policy.capture import CaptureError, capture_graph
from kcoder.policy.emit_cuda import render_cuda, row_layout
from kcoder.policy.graph import load_graph
from kcoder.policy.plan import Unsupported, plan_graph
from kcoder.policy.program import render_program
from kcoder.tune.space import parse_space

HERE = Path(__file__).parent / "problems"
EXAMPLES = Path(__file__).parents[2] / "examples"
# What forward may do: allocate, view, call the extension or (allowed) the library GEMM.
FORWARD_OK = re.compile(r"^(_dev = .*|t_\w+ = (torch\.empty\(.*|inputs\[\d+\]|self\.get_\w+\(.*\)|t_\w+)"
                        r"[\w.(), \[\]:]*|_ext\.k\d+\(\[.*\]\)|t_\w+ = torch\.mm\(.*\)|return .*)$")


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """Captured graphs, by problem file (each capture is one child process)."""
    cache: dict[Path, object] = {}

    def get(path: Path):
        if path not in cache:
            cache[path] = load_graph(capture_graph(path, tmp_path_factory.mktemp("capture")))
        return cache[path]
    return get


def _forward_lines(source: str) -> list[str]:
    body = source.split("    def forward(self, *inputs):\n", 1)[1]
    return [line.strip() for line in body.splitlines() if line.strip()]


def test_pointwise_dag_is_one_kernel_without_copies(graphs):
    graph = graphs(HERE / "pointwise.py")
    plan = plan_graph(graph, [])
    assert [k.describe() for k in plan.kernels] == ["pointwise over [3, 29, 31]"]
    source = render_program(plan, graph, "cpu", "pointwise.py")
    lines = _forward_lines(source)
    assert all(FORWARD_OK.match(line) for line in lines), lines
    # the transposed input goes in as it is (the kernel reads it with its strides): no copy
    assert ".contiguous(" not in source and "_ext.k0([inputs[0], inputs[1], " in source
    assert "self.get_parameter('scale').expand(3, 29, 31)" in source  # broadcast as a view
    space = parse_space(source)
    assert space.params and space.current == {"CHUNK": 0, "BLOCK": 4096}


def test_reductions_fuse_prologue_and_epilogue(graphs):
    plan = plan_graph(graphs(HERE / "reductions.py"), [])
    kinds = [k.describe() for k in plan.kernels]
    assert "row reduction (max+sum) over dims [1] of [67, 45]" in kinds  # softmax: one kernel
    assert "row reduction (sum+sum) over dims [1] of [67, 45]" in kinds  # layer norm: mean, variance
    assert "row reduction (sum) over dims [0, 1] of [67, 45]" in kinds  # mse, smooth-l1: whole-tensor sums
    assert any("max+sum+sum" in k for k in kinds)  # cross-entropy: log-softmax + the target's pick
    assert "row reduction (max+sum+argmax) over dims [1] of [67, 45]" in kinds  # logsumexp + argmax
    assert len(plan.kernels) == 7


@pytest.mark.parametrize("example", ["softmax_rows", "mse_loss", "elementwise_chain"])
def test_examples_are_single_kernels(graphs, example):
    plan = plan_graph(graphs(EXAMPLES / example / "model.py"), [])
    assert len(plan.kernels) == 1


def test_gemm_needs_allow_then_keeps_the_library_call(graphs):
    graph = graphs(HERE / "linear_epilogue.py")
    with pytest.raises(Unsupported, match=r"aten\.mm\.default x1 \(library gemm needs --allow gemm\)"):
        plan_graph(graph, [])
    plan = plan_graph(graph, ["gemm"])
    assert plan.needs == {"gemm"} and [k.describe() for k in plan.kernels] == ["pointwise over [20, 33]"]
    lines = _forward_lines(render_program(plan, graph, "cpu", "linear_epilogue.py"))
    assert any(line.startswith("t_mm = torch.mm(inputs[0], t_permute)") for line in lines)


def test_conv_then_batch_norm_is_one_epilogue_kernel(graphs):
    graph = graphs(HERE / "conv_bn_relu.py")
    with pytest.raises(Unsupported, match=r"aten\.convolution\.default x1 \(library conv needs --allow conv\)"):
        plan_graph(graph, [])
    plan = plan_graph(graph, ["conv"])
    assert [k.describe() for k in plan.kernels] == ["row reduction (sum+sum) over dims [0, 2, 3] of [2, 8, 9, 11]"]
    source = render_program(plan, graph, "cpu", "conv_bn_relu.py")
    assert "torch.nn.functional.conv2d(inputs[0]" in source
    assert ("'bn.running_mean', (8,), 'float32', 'buffer'") in source  # the state dict's names


def test_vector_norms_are_row_reductions(graphs, tmp_path):
    problem = tmp_path / "norms.py"
    problem.write_text(
        "import torch\nimport torch.nn.functional as F\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, a, b):\n"
        "        return a / torch.norm(a, p=2, dim=1, keepdim=True), F.cosine_similarity(a, b, dim=1)\n\n\n"
        "def get_inputs():\n    return [torch.randn(16, 64), torch.randn(16, 64)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    kinds = [k.describe() for k in plan_graph(graphs(problem), []).kernels]
    assert kinds == ["row reduction (sum) over dims [1] of [16, 64]",
                     "row reduction (sum+sum+sum) over dims [1] of [16, 64]"]


def test_unsupported_ops_are_counted_by_name(graphs):
    with pytest.raises(Unsupported) as info:
        plan_graph(graphs(HERE / "cumsum.py"), [])
    assert info.value.census == {"aten.cumsum.default": 1}
    assert str(info.value) == "unsupported: aten.cumsum.default x1"


def test_capture_error_names_the_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x.item()\ndef get_inputs():\n    return [torch.randn(3)]\n"
                   "def get_init_inputs():\n    return []\n")
    with pytest.raises(CaptureError, match=r"bad\.py: could not trace Model\.forward"):
        capture_graph(bad, tmp_path / "work")


@pytest.mark.parametrize("problem", ["reductions.py", "linear_epilogue.py", "conv_bn_relu.py"])
def test_generated_files_pass_the_static_checks(graphs, problem):
    from kcoder.evaluate.static import check_source

    graph = graphs(HERE / problem)
    plan = plan_graph(graph, ["gemm", "conv"])
    for device in ("cpu", "cuda"):
        source = render_program(plan, graph, device, problem)
        findings = check_source(source, allow=["gemm", "conv"], reference_stems={Path(problem).stem})
        assert findings == [], [f.describe("model_new.py") for f in findings]


def test_cuda_source_for_each_family(graphs, tmp_path):
    """The CUDA target's text (no GPU here): launchers on the current stream, TUNE as -D flags;
    when nvcc is present, the torch-free CUDA unit compiles."""
    for problem in ("reductions.py", "pointwise.py", "reduction_layouts.py"):
        graph = graphs(HERE / problem)
        plan = plan_graph(graph, [])
        cpp, cuda = render_cuda(plan)
        assert "getCurrentCUDAStream" in cpp and "torch" not in cuda.lower()
        source = render_program(plan, graph, "cuda", problem)
        assert 'extra_cuda_cflags=["-O3", *[f"-D{k}={v}" for k, v in CONFIG.items()]]' in source
        if shutil.which("nvcc"):
            unit = tmp_path / f"{problem}.cu"
            unit.write_text("#define THREADS 256\n#define EPT 2\n" + cuda)
            done = subprocess.run(["nvcc", "-arch=sm_90", "-c", str(unit), "-o", str(unit) + ".o"],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]


def test_cuda_row_layouts_follow_the_shapes(graphs):
    """Strided or short rows get a thread each, a few long single-stage rows are split across
    blocks (with the scratch for their partials allocated in the binding), the rest a block per row."""
    plan = plan_graph(graphs(HERE / "reduction_layouts.py"), [])
    layouts = {k.describe(): row_layout(k) for k in plan.kernels}
    assert layouts == {
        "row reduction (sum+argmax) over dims [1] of [64, 129, 300]": "thread",
        "row reduction (max) over dims [1] of [40000, 5]": "thread",
        "row reduction (sum) over dims [0, 1] of [3, 40001]": "split",
        "row reduction (max) over dims [0] of [70001]": "split"}
    cpp, cuda = render_cuda(plan)
    assert cpp.count("torch::zeros({g.O}") == 2 and cuda.count("atomicAdd(&count[o], 1u)") == 2
    softmax = plan_graph(graphs(HERE / "reductions.py"), [])
    assert {row_layout(k) for k in softmax.kernels if k.dims} == {"block"}
