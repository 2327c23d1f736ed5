"""forward's steps as one C++ function (policy/native_forward.py): what each step becomes, and
that a step outside the forms leaves forward in Python. The C++ is built and run against the
problems' Models by test_any_batch (scans, reductions at drawn batch sizes) and the policy's
optimize tests."""

from __future__ import annotations

from kcoder.policy.native_forward import NAME, translate

STATE = [("weight", "param"), ("lin.bias", "param"), ("running_mean", "buffer")]
STEPS = [
    "_dev = inputs[1].device",
    "_check_shapes(inputs)",
    "B = inputs[1].shape[0]",
    "_ext.kc_batch_set(B)",
    "t_y = torch.empty((B, 8), dtype=torch.float32, device=_dev)",
    "_ext.k0([inputs[1], self.get_parameter('weight').expand(B, 8), self.get_buffer('running_mean')[None], t_y])",
    "t_w = inputs[1][(slice(None), slice(2, None, 1),)]",
    "t_w = t_w.unfold(1, 3, 2).permute(1, 0, 2)",
    "t_mm = torch.mm(t_y, self.get_parameter('lin.bias').reshape((8, 1)))",
    "t_c = torch.nn.functional.conv2d(inputs[0], t_w, None, (1, 1), (0, 0), (1, 1), 1)",
    "t_z = torch.empty((B * 2 // 2,), dtype=torch.int64, device=_dev)",
    "t_s = self.get_parameter('weight')[None, None]",
    "_ext.k1([t_mm, t_z.unsqueeze(1).expand(B, 1)])",
]
MADE_FOR = [(1, (None, 8)), (0, (2, 3, 4, 4))]


def test_every_step_becomes_a_line_of_one_cpp_function():
    native = translate(STEPS, ["t_z"], STATE, MADE_FOR)
    assert native is not None
    lines = native.cpp.splitlines()
    body = lines[lines.index(f"torch::Tensor {NAME}(std::vector<torch::Tensor> in, std::vector<torch::Tensor> st) {{"):]
    assert body[1:] == [
        '  TORCH_CHECK(in.size() == 2 && st.size() == 3, '
        f'"{NAME}: expected 2 inputs and 3 parameters and buffers");',
        "  const c10::Device kc_dev = in[0].device();",
        "  kc_check_shape(in[0], 1, {-1, 8});",  # inputs[1] is the first one forward passes
        "  kc_check_shape(in[1], 0, {2, 3, 4, 4});",
        "  const int64_t B = in[0].size(0);",
        "  kc_batch_set(B);",
        "  torch::Tensor t_y = at::empty({B, 8LL}, at::TensorOptions().dtype(at::kFloat).device(kc_dev));",
        "  k0({in[0], st[0].expand({B, 8LL}), st[2].unsqueeze(0), t_y});",
        "  torch::Tensor t_w = in[0].slice(1, 2LL, INT64_MAX, 1LL);",
        "  t_w = t_w.unfold(1LL, 3LL, 2LL).permute({1LL, 0LL, 2LL});",  # assigned again: no second declaration
        "  torch::Tensor t_mm = at::mm(t_y, st[1].reshape({8LL, 1LL}));",
        "  torch::Tensor t_c = at::conv2d(in[1], t_w, std::optional<at::Tensor>(), at::IntArrayRef({1LL, 1LL}), "
        "at::IntArrayRef({0LL, 0LL}), at::IntArrayRef({1LL, 1LL}), 1LL);",
        "  torch::Tensor t_z = at::empty({((B * 2LL) / 2LL)}, at::TensorOptions().dtype(at::kLong).device(kc_dev));",
        "  torch::Tensor t_s = st[0].unsqueeze(0).unsqueeze(0);",
        "  k1({t_mm, t_z.unsqueeze(1LL).expand({B, 1LL})});",
        "  return t_z;",
        "}",
    ]
    # Python passes the inputs forward reads, in that order, and the state in STATE's order
    # (a plain name by attribute: nn.Module's lookup is cheaper than get_parameter's walk)
    assert native.python == [f"return _ext.{NAME}((inputs[1], inputs[0]), "
                             "[self.weight, self.get_parameter('lin.bias'), self.running_mean])"]


def test_several_outputs_come_back_as_a_tuple():
    steps = ["_dev = inputs[0].device", "t_a = torch.empty((4,), dtype=torch.float32, device=_dev)",
             "t_b = torch.empty((4,), dtype=torch.float32, device=_dev)", "_ext.k0([inputs[0], t_a, t_b])"]
    native = translate(steps, ["t_a", "t_b"], [], [])
    assert native is not None
    assert f"std::vector<torch::Tensor> {NAME}(" in native.cpp and "  return {t_a, t_b};" in native.cpp
    assert native.python == [f"return tuple(_ext.{NAME}((inputs[0],), []))"]


def test_a_step_outside_the_forms_leaves_forward_in_python():
    base = ["_dev = inputs[0].device", "t_a = torch.empty((4,), dtype=torch.float32, device=_dev)"]
    outside = [
        "t_b = inputs[0].sum()",  # compute, not a view
        "t_b = torch.relu(inputs[0])",
        "t_b = torch.empty((4,), dtype=torch.complex64, device=_dev)",  # a dtype it has no name for
        "t_b = self.get_parameter('missing')",  # not in STATE
        "_ext.k0([t_a]); _ext.k1([t_a])",  # two statements
        "_ext.k0([t_nowhere])",  # a name never assigned
        "t_b = t_a.expand(4 ** 2)",
        "t_b = t_a[..., 1]",
        "x = torch.empty((4,), dtype=torch.float32, device=_dev)",  # not a name the planner writes
        "_ext.kc_forward([t_a])",  # not one of its kernels
    ]
    assert translate(base + ["_ext.k0([t_a])"], ["t_a"], [], []) is not None
    for step in outside:
        assert translate(base + [step], ["t_a"], [("weight", "param")], []) is None, step
    assert translate(base, ["t_missing"], [], []) is None  # returns a name forward never made
