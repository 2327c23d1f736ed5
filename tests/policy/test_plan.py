"""Capture and planning without builds: which kernels a module becomes, and that forward only
allocates, takes views and calls kernels (the evaluator refuses torch compute there)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kcoder.policy.capture import CaptureError, capture_graph
from kcoder.policy.emit_cuda import render_cuda, row_layout, tune_space, units
from kcoder.policy.graph import load_graph
from kcoder.policy.plan import Unsupported, plan_graph
from kcoder.policy.program import render_program
from kcoder.tune.space import parse_space

HERE = Path(__file__).parent / "problems"
EXAMPLES = Path(__file__).parents[2] / "examples"
# What forward may do: allocate, view, call the extension or (allowed) the library GEMM.
FORWARD_OK = re.compile(r"^(_dev = .*|_check_shapes\(inputs\)|B = inputs\[\d+\]\.shape\[0\]|"
                        r"t_\w+ = (torch\.empty\(.*|inputs\[\d+\]|self\.get_\w+\(.*\)|t_\w+)"
                        r"[\w.(), \[\]:*-]*|_ext\.k\d+\(\[.*\]\)|t_\w+ = torch\.mm\(.*\)|return .*)$")


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
    """forward's Python steps (a program rendered with native=False: the steps native_forward.py translates)."""
    body = source.split("    def forward(self, *inputs):\n", 1)[1]
    return [line.strip() for line in body.splitlines() if line.strip()]


def test_pointwise_dag_is_one_kernel_without_copies(graphs):
    graph = graphs(HERE / "pointwise.py")
    plan = plan_graph(graph, [])
    assert [k.describe() for k in plan.kernels] == ["pointwise over [3, 29, 31]"]
    source = render_program(plan, graph, "cpu", "pointwise.py", native=False)
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
    lines = _forward_lines(render_program(plan, graph, "cpu", "linear_epilogue.py", native=False))
    assert any(line.startswith("t_mm = torch.mm(inputs[0], t_permute)") for line in lines)


def test_conv_then_batch_norm_is_one_epilogue_kernel(graphs):
    graph = graphs(HERE / "conv_bn_relu.py")
    with pytest.raises(Unsupported, match=r"aten\.convolution\.default x1 \(library conv needs --allow conv\)"):
        plan_graph(graph, [])
    plan = plan_graph(graph, ["conv"])
    assert [k.describe() for k in plan.kernels] == ["row reduction (sum+sum) over dims [0, 2, 3] of [2, 8, 9, 11]"]
    source = render_program(plan, graph, "cpu", "conv_bn_relu.py")
    assert "torch::Tensor t_convolution = at::conv2d(in[0], st[0], st[1], " in source  # forward's C++
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
        plan_graph(graphs(HERE / "sort.py"), [])
    assert info.value.census == {"aten.sort.default": 1}
    assert str(info.value) == "unsupported: aten.sort.default x1"


def test_capture_error_names_the_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x.item()\ndef get_inputs():\n    return [torch.randn(3)]\n"
                   "def get_init_inputs():\n    return []\n")
    with pytest.raises(CaptureError, match=r"bad\.py: could not trace Model\.forward"):
        capture_graph(bad, tmp_path / "work")


@pytest.mark.parametrize("problem", ["reductions.py", "linear_epilogue.py", "conv_bn_relu.py", "scans.py"])
def test_generated_files_pass_the_static_checks(graphs, problem):
    from kcoder.evaluate.static import check_source

    graph = graphs(HERE / problem)
    plan = plan_graph(graph, ["gemm", "conv"])
    for device in ("cpu", "cuda"):
        source = render_program(plan, graph, device, problem)
        findings = check_source(source, allow=["gemm", "conv"], reference_stems={Path(problem).stem})
        assert findings == [], [f.describe("model_new.py") for f in findings]


def test_cuda_source_for_each_family(graphs, tmp_path):
    """The CUDA target's text (no GPU here): launchers on the current stream, TUNE as -D flags,
    sizes and strides as literals checked by the binding; when nvcc is present, the torch-free
    CUDA unit compiles."""
    for problem in ("reductions.py", "pointwise.py", "reduction_layouts.py", "scans.py", "scan_rows.py"):
        graph = graphs(HERE / problem)
        plan = plan_graph(graph, [])
        cpp, cuda = render_cuda(plan, graph)
        assert "getCurrentCUDAStream" in cpp and "torch" not in cuda.lower()
        assert cpp.count("this kernel was generated for sizes") == len(plan.kernels)
        assert "KArgs" not in cuda and "a.L" not in cuda  # no run-time geometry left
        if problem == "scan_rows.py":  # a warp per row; vectors through the transpose buffer
            assert [row_layout(k) for k in plan.kernels] == ["warp"] * 5
            assert cuda.count("__shared__ float kc_tb[THREADS / 32][528];") == 5
            assert cuda.count("const float4 g = *reinterpret_cast<const float4*>(p") == 4  # not the odd rows
        source = render_program(plan, graph, "cuda", problem)
        assert 'extra_cuda_cflags=["-O3", *[f"-D{k}={v}" for k, v in CONFIG.items()]]' in source
        if shutil.which("nvcc"):
            unit = tmp_path / f"{problem}.cu"
            unit.write_text("#define THREADS 256\n#define UNROLL 2\n" + cuda)
            done = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-c", str(unit), "-o", str(unit) + ".o"],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]


def test_cuda_row_layouts_follow_the_shapes(graphs):
    """Strided rows get a column block (32 rows a block, its warps splitting each), tiny rows a
    thread each, few long rows are split across blocks (one launch per stage, with the scratch
    for their partials allocated in the binding), many short contiguous rows a warp each, the
    rest a block per row; softmax's max and sum are two plain passes over a row kept in
    registers, and contiguous float rows move as float4."""
    graph = graphs(HERE / "reduction_layouts.py")
    plan = plan_graph(graph, [])
    layouts = {k.describe(): row_layout(k) for k in plan.kernels}
    assert layouts == {
        "row reduction (sum+argmax) over dims [1] of [64, 129, 300]": "column",
        "row reduction (max) over dims [1] of [40000, 5]": "thread",
        "row reduction (sum) over dims [0, 1] of [3, 40001]": "split",
        "row reduction (max) over dims [0] of [70001]": "split"}
    cpp, cuda = render_cuda(plan, graph)
    # strided rows (a middle dim): a column block, partials combined in shared memory
    (middle,) = [u for u in units(plan, graph) if u.layout == "column"]
    assert "kc_column_reduce<C_sum>(a0, sh)" in cuda_of(middle) and "if (live && ty == 0) {" in cuda_of(middle)
    assert cpp.count("auto count = torch::zeros(") == 2 and cuda.count("atomicAdd(&count[o * 1 + 0], 1u)") == 2
    assert "f1 = C_argmax::c(f1, AccF{" in cuda  # a float argmax compares in float, a float sum adds V in float
    assert "a0.v += (double)q0;" in cuda
    assert tune_space(cuda) == {"THREADS": [128, 256, 512], "UNROLL": [1, 2, 4]}
    graph = graphs(EXAMPLES / "softmax_rows" / "model.py")
    softmax = plan_graph(graph, [])
    assert [row_layout(k) for k in softmax.kernels] == ["block"]
    cpp, cuda = render_cuda(softmax, graph)
    # 4096-element rows kept in registers: x is read once, the max and the sum of exp are two
    # plain passes over the registers (no online update), and UNROLL would change nothing
    assert "kc_block_reduce<C_max>" in cuda and "kc_block_reduce<C_lse>" not in cuda
    assert "reinterpret_cast<const float4*>" in cuda and "reinterpret_cast<float4*>" in cuda
    assert cuda.count("xc0[q * V + j]") == 3 and tune_space(cuda) == {"THREADS": [128, 256, 512]}
    # the file's CONFIG names exactly the knobs its TUNE declares: the tune tool can rewrite it
    space = parse_space(render_program(softmax, graph, "cuda", "model.py"))
    assert space.current == {"THREADS": 256} and space.rewrite({"THREADS": 512}).count('CONFIG = {"THREADS": 512}') == 1


def cuda_of(u) -> str:
    from kcoder.policy.cuda_kernels import row_kernel

    return "\n".join(row_kernel(u))


def test_cuda_long_rows_live_in_a_clusters_shared_memory(graphs, tmp_path):
    """Rows too long for registers and passed over twice (a softmax over 40000 columns): each
    row over a cluster of blocks holding it in shared memory (read from memory once), partials
    combined over the cluster, a block-per-row kernel where the cluster cannot be resident."""
    path = _module(tmp_path, "long_softmax", [], "torch.softmax(x0, dim=1)", [(300, 40000)])
    graph = graphs(path)
    plan = plan_graph(graph, [])
    (u,) = units(plan, graph)
    assert (u.layout, u.cl, u.chunk, u.smem) == ("cluster", 2, 20000, {0})  # 80 KB a block: two an SM
    cpp, cuda = render_cuda(plan, graph)
    assert "KC_CLUSTER_DIMS(2)" in cuda and "kc_cluster_reduce<C_max, 2>" in cuda
    assert "kc_cluster_reduce<C_sum, 2>" in cuda
    assert "if (fits) k0_cluster<4><<<600u, 512, 80000, stream>>>(a);" in cuda
    assert "else k0_kernel<4><<<300u, THREADS, 0, stream>>>(a);" in cuda
    kernel = cuda[cuda.index("k0_cluster(const KPtrs a)"):cuda.index("cudaError_t launch_k0")]
    assert kernel.count("p0 + b0 + r0") == 1 and kernel.count("p0[b0 + r0]") == 1  # x read once: the fill
    assert "kc_block_reduce<C_lse>" not in kernel  # the row on chip: plain passes (the fallback's is online)
    if shutil.which("nvcc"):
        unit = tmp_path / "long_softmax.cu"
        unit.write_text("#define THREADS 256\n#define UNROLL 2\n" + cuda)
        done = subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_80,code=sm_80",
                               "-gencode=arch=compute_90,code=sm_90", "-c", str(unit), "-o", str(unit) + ".o"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]


def test_cuda_geometry_from_forward_on_meta(graphs):
    """The operands' sizes and strides each kernel is rendered for: forward run on meta tensors,
    dims coalesced as the kernels index them."""
    from kcoder.policy.geometry import kernel_geometry

    graph = graphs(HERE / "pointwise.py")
    plan = plan_graph(graph, [])
    (geo,) = kernel_geometry(plan, graph).values()
    assert geo.O * geo.L == 3 * 29 * 31 and len(geo.strides) == len(plan.kernels[0].operands)
    assert geo.is_ == [31] and geo.os == [3, 29]
    # x contiguous, y the transposed input get_inputs gives (its strides come from the capture),
    # the scale broadcast along the last dim, the output contiguous
    assert [st[-1] for st in geo.strides] == [1, 29, 0, 1]
    graph = graphs(HERE / "scans.py")
    plan = plan_graph(graph, [])
    strided = kernel_geometry(plan, graph)["k1"]  # cumprod along a middle dim, through a permuted view
    assert strided.is_ == [1003] and strided.ist == [[2051], [2051]]


def _module(tmp_path: Path, stem: str, init: str, forward: str, shapes: list[tuple[int, ...]]) -> Path:
    """A problem file: `init` lines of __init__, `forward`'s return expression over x0, x1 ..."""
    args = ", ".join(f"x{i}" for i in range(len(shapes)))
    path = tmp_path / f"{stem}.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        + "".join(f"        {line}\n" for line in init or ["pass"])
        + f"\n    def forward(self, {args}):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return [{', '.join(f'torch.randn{s}' for s in shapes)}]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    return path


def _interpret(graph, inputs: list) -> list:
    """The graph's outputs computed by torch, node by node (views as plan.py writes them), to
    check the window views' semantics without a build."""
    import torch

    from kcoder.policy.plan import _view_suffix

    env: dict[str, object] = {}
    for name in graph.needed():
        node = graph.nodes[name]
        val = lambda a: env[a.name] if hasattr(a, "name") else a  # noqa: E731
        if node.kind == "source":
            env[name] = inputs[node.attrs["key"]]
        elif node.kind == "view":
            env[name] = eval("t" + _view_suffix(node, graph), {"t": env[node.args[0].name]})
        elif node.kind == "reduce":
            x, dims = env[node.args[0].name], node.attrs["dims"]
            env[name] = x.sum(dims) if node.op == "sum" else x.amax(dims)
        else:
            env[name] = getattr(torch, node.op)(*[val(a) for a in node.args])
    return [env[o.name] for o in graph.outputs]


def test_pooling_after_conv_is_one_reduction_kernel(graphs, tmp_path):
    problem = _module(tmp_path, "conv_pool", [
        "self.conv = nn.Conv2d(3, 8, 3)", "self.conv3 = nn.Conv3d(2, 4, 3)",
        "self.bias = nn.Parameter(torch.randn(8, 1, 1))", "self.mp = nn.MaxPool2d(2)", "self.ap = nn.AvgPool3d(2)"],
        "torch.relu(self.mp(torch.relu(self.conv(x0)) + self.bias)), torch.tanh(self.ap(self.conv3(x1)))",
        [(2, 3, 12, 14), (2, 2, 8, 10, 9)])
    graph = graphs(problem)
    with pytest.raises(Unsupported, match="convolution"):
        plan_graph(graph, [])
    plan = plan_graph(graph, ["conv"])
    # the conv's epilogue (relu, + bias) is computed inside the pooling kernel: no kernel of its own
    assert [k.describe() for k in plan.kernels] == [
        "row reduction (max) over dims [4, 5] of [2, 8, 5, 6, 2, 2]",
        "row reduction (sum) over dims [5, 6, 7] of [2, 4, 3, 4, 3, 2, 2, 2]"]
    lines = _forward_lines(render_program(plan, graph, "cpu", "conv_pool.py", native=False))
    assert all(FORWARD_OK.match(line) or "functional.conv" in line for line in lines), lines
    assert "t_getitem__w0_u0 = t_convolution.unfold(2, 2, 2)" in lines


def test_pooling_after_pointwise_matches_torch(graphs, tmp_path):
    """Max and avg, 2d and 3d, odd sizes, overlapping windows, dilation, divisor_override."""
    import torch
    import torch.nn.functional as F

    problem = _module(tmp_path, "pw_pool", [], ", ".join([
        "F.max_pool3d(torch.sigmoid(x0) * 3.0, 2)", "F.avg_pool3d(x0 - 1.0, (2, 3, 2))",
        "F.max_pool2d(x1 * x1, 3, stride=2, dilation=2)", "F.avg_pool2d(torch.exp(x1), 3, 1)",
        "F.avg_pool2d(x1, 2, divisor_override=3)", "F.max_pool1d(x1[0] + 1.0, 4)"]),
        [(2, 3, 7, 9, 5), (2, 4, 11, 13)])
    graph = graphs(problem)
    plan = plan_graph(graph, [])
    # one reduction per pooling. Kernels of their own: the prologues of overlapping windows
    # (dilated max, stride-1 avg: computed once, not once per window), and 1d pooling's prologue
    # and squeezed output (it goes through an unsqueeze)
    assert [len(k.stages) for k in plan.kernels if k.dims] == [1] * 6 and len(plan.kernels) == 10
    assert plan.kernels[0].describe() == "row reduction (max) over dims [5, 6, 7] of [2, 3, 3, 4, 2, 2, 2, 2]"
    x0, x1 = torch.randn(2, 3, 7, 9, 5), torch.randn(2, 4, 11, 13)
    want = [F.max_pool3d(torch.sigmoid(x0) * 3.0, 2), F.avg_pool3d(x0 - 1.0, (2, 3, 2)),
            F.max_pool2d(x1 * x1, 3, stride=2, dilation=2), F.avg_pool2d(torch.exp(x1), 3, 1),
            F.avg_pool2d(x1, 2, divisor_override=3), F.max_pool1d(x1[0] + 1.0, 4)]
    for got, ref in zip(_interpret(graph, [x0, x1]), want, strict=True):
        assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5)
    source = render_program(plan, graph, "cuda", "pw_pool.py", native=False)
    lines = _forward_lines(source)
    assert all(FORWARD_OK.match(line) for line in lines), [ln for ln in lines if not FORWARD_OK.match(ln)]


def test_pooling_with_padding_or_indices_stays_unsupported(graphs, tmp_path):
    padded = _module(tmp_path, "padded", [], "F.max_pool2d(x0, 3, stride=2, padding=1)", [(2, 3, 9, 9)])
    with pytest.raises(Unsupported) as info:
        plan_graph(graphs(padded), [])
    assert info.value.census == {"aten.max_pool2d_with_indices.default (padding)": 1}
    avg = _module(tmp_path, "ceil", [], "F.avg_pool2d(x0, 2, ceil_mode=True)", [(2, 3, 9, 9)])
    with pytest.raises(Unsupported, match=r"aten\.avg_pool2d\.default \(ceil_mode\) x1"):
        plan_graph(graphs(avg), [])
    indices = _module(tmp_path, "indices", [], "F.max_pool2d(x0, 2, return_indices=True)", [(2, 3, 8, 8)])
    with pytest.raises(Unsupported) as info:
        plan_graph(graphs(indices), [])
    assert info.value.census == {"aten.max_pool2d_with_indices.default (indices)": 1}


def test_scans_fuse_prologue_and_epilogue(graphs):
    """One kernel per scan: the masked cumsum with its mask product and epilogue inlined, the
    cumprod along a middle dim read through a permuted view (thread per strided row on CUDA),
    and the reverse and exclusive spellings read x itself (no flip or cat kernel)."""
    graph = graphs(HERE / "scans.py")
    plan = plan_graph(graph, [])
    assert {k.describe(): row_layout(k) for k in plan.kernels} == {
        "scan (cumsum) along dim 1 of [37, 2999]": "block",
        "scan (cumprod) along dim 1 of [2, 1003, 2051]": "thread",
        "reverse scan (cumsum) along dim 1 of [37, 2999]": "block",
        "exclusive scan (cumsum) along dim 1 of [37, 2999]": "block"}
    assert plan.lines[1] == "_ext.k0([inputs[0], inputs[1], t_add])"
    assert plan.lines[3] == "_ext.k1([inputs[2].permute(0, 2, 1), t_cumprod.permute(0, 2, 1)])"
    assert [line for line in plan.lines if line.startswith("_ext.k")][2:] == [
        "_ext.k2([inputs[0], t_flip_1])", "_ext.k3([inputs[0], t_cat])"]
    masked = plan.kernels[0]
    assert masked.scan.value == "v_mul" and [v for _, v in masked.stores] == ["v_add"]
    source = render_program(plan, graph, "cpu", "scans.py")
    assert source.count("const int64_t r = L - 1 - i;") == 2  # the reverse scan, both paths


def test_scans_along_any_dim_and_what_stays_unsupported(graphs, tmp_path):
    problem = _module(tmp_path, "scan_dims", [], "torch.cumsum(x0, dim=-1), torch.relu(torch.cumprod(x1, 0)) + x1",
                      [(5, 7, 1001), (33, 6)])
    plan = plan_graph(graphs(problem), [])
    assert [k.describe() for k in plan.kernels] == ["scan (cumsum) along dim 2 of [5, 7, 1001]",
                                                    "scan (cumprod) along dim 0 of [33, 6]"]
    # one module, every case an output: the census names each
    cases = {"torch.cumsum(x0 > 0, 1)": "aten.cumsum.default (torch.int64 output)",
             "x0.flip(1).cumsum(1)": "aten.flip.default",  # only flip, scan, flip is a reverse scan
             "x0.flip(0).cumsum(1).flip(0)": "aten.flip.default",
             "torch.cat((torch.ones_like(x0[:, :1]), x0[:, :-1].cumsum(1)), 1)": "aten.cat.default",
             "torch.cummax(x0, 1).values": "aten.cummax.default"}
    with pytest.raises(Unsupported) as info:
        plan_graph(graphs(_module(tmp_path, "scan_bad", [], ", ".join(cases), [(4, 9)])), [])
    assert info.value.census == {"aten.cumsum.default (torch.int64 output)": 1, "aten.flip.default": 3,
                                 "aten.cat.default": 1, "aten.cummax.default": 1}
