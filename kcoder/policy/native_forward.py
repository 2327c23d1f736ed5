"""forward's steps as one C++ function of the extension, so that a call from Python costs one
crossing into C++ instead of one per step.

Why: each Python step of forward (a shape check, `torch.empty`, a parameter lookup and its
`expand`, a pybind call per kernel) costs about 1-5 us of host time. On a GPU a small problem's
kernels run for tens of microseconds, so a forward of ten Python steps was host-bound: measured
on an H100 (bench/results/h100-2026-12-07c), the policy's elementwise_chain candidate took
34.6 us of host time per call where the hand-written solution, one C++ call, took 17.7 us.

The steps are translated from the planner's text (the forms interpret.py runs: allocation,
views, the library calls the user allowed, kernel calls), each parsed with ast, never
evaluated. A step outside those forms leaves forward in Python (translate returns None), which
is slower but the same computation. The C++ calls the same ATen functions as the Python did,
through the dispatcher, so the judge's guard sees each of them as before.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kcoder.policy.batchdims import BATCH, BATCH_VAR

NAME = "kc_forward"
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
# The names the planner writes (plan.py): tensors t_<node>, kernels k<n>. Nothing else becomes C++.
_TENSOR = re.compile(r"^t_\w+$")
_KERNEL = re.compile(r"^k\d+$")
_DTYPES = {"float32": "at::kFloat", "float64": "at::kDouble", "float16": "at::kHalf", "bfloat16": "at::kBFloat16",
           "int64": "at::kLong", "int32": "at::kInt", "int16": "at::kShort", "int8": "at::kChar",
           "uint8": "at::kByte", "bool": "at::kBool"}
# Tensor methods whose arguments are one size list (Python passes them spread or as a tuple).
_LIST_METHODS = {"expand", "reshape", "view", "permute"}
_SCALAR_METHODS = {"unsqueeze": 1, "squeeze": 1, "select": 2, "transpose": 2, "unfold": 3, "t": 0}
_LIBRARY = {"torch.mm": ("at::mm", 2), "torch.bmm": ("at::bmm", 2), "torch.addmm": ("at::addmm", 3),
            "torch._addmm_activation": ("at::_addmm_activation", 3)}
# `//` and `%` agree with C++'s `/` and `%` only on non-negative operands: sizes and the batch are
_INT_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}
_CONV = re.compile(r"^torch\.nn\.functional\.(conv[123]d|conv_transpose[123]d)$")

CHECK_SHAPE = r"""
// The shapes this forward was made for (-1: any size there), checked as the Python forward did.
static void kc_check_shape(const torch::Tensor& t, int64_t pos, std::initializer_list<int64_t> want) {
  bool ok = t.dim() == (int64_t)want.size();
  for (size_t d = 0; ok && d < want.size(); ++d) ok = want.begin()[d] < 0 || want.begin()[d] == t.size(d);
  if (ok) return;
  std::string shape;
  for (int64_t w : want) shape += (shape.empty() ? "" : ", ") + (w < 0 ? std::string("*") : std::to_string(w));
  TORCH_CHECK_VALUE(false, "this kernel was made for inputs[", pos, "] of shape [", shape, "]; got ", t.sizes(),
                    ": generate it again for this shape");
}
"""


class Untranslatable(Exception):
    """A step outside the forms this module writes in C++."""


@dataclass
class NativeForward:
    cpp: str  # the C++ function (and its shape check), for the end of the binding's source
    python: list[str]  # forward's body in Python: the one call


def translate(lines: list[str], returns: list[str], state: list[tuple[str, str]],
              made_for: list[tuple[int, tuple[int | None, ...]]]) -> NativeForward | None:
    """forward's `lines` (then `return returns`) as the C++ function NAME, or None.

    state: (key, kind) of Model's parameters and buffers, in STATE's order; made_for: the shape
    each input was made for (None: any size there)."""
    try:
        writer = _Writer(state)
        steps = [writer.statement(line) for line in lines]
        checks = [f"  kc_check_shape(in[{writer.input(pos)}], {pos}, {{{', '.join(_dim(s) for s in shape)}}});"
                  for pos, shape in made_for]
        body = _with_checks(steps, checks)
        outs = [writer.tensor_name(r) for r in returns]
    except Untranslatable:
        return None
    single = len(outs) == 1
    head = (f"{'torch::Tensor' if single else 'std::vector<torch::Tensor>'} {NAME}"
            "(std::vector<torch::Tensor> in, std::vector<torch::Tensor> st) {")
    sizes = (f"  TORCH_CHECK(in.size() == {len(writer.inputs)} && st.size() == {len(state)}, "
             f"\"{NAME}: expected {len(writer.inputs)} inputs and {len(state)} parameters and buffers\");")
    result = f"  return {outs[0]};" if single else f"  return {{{', '.join(outs)}}};"
    cpp = "\n".join([CHECK_SHAPE, head, sizes, *body, result, "}", ""])
    args = ", ".join(f"inputs[{pos}]" for pos in writer.inputs)
    states = ", ".join(_state_expr(key, kind) for key, kind in state)
    call = f"_ext.{NAME}(({args}{',' if len(writer.inputs) == 1 else ''}), [{states}])"
    return NativeForward(cpp, [f"return {call}" if single else f"return tuple({call})"])


def _with_checks(steps: list[str], checks: list[str]) -> list[str]:
    """The shape checks where the Python forward made them (the CHECK step)."""
    out: list[str] = []
    for step in steps:
        out += checks if step == "CHECK" else [step]
    return out


def _dim(size: int | None) -> str:
    return "-1" if size is None else str(int(size))


def _state_expr(key: str, kind: str) -> str:
    if _IDENT.match(key) and not key.startswith("_"):
        return f"self.{key}"  # nn.Module's attribute lookup: cheaper than get_parameter's path walk
    return f"self.{'get_parameter' if kind == 'param' else 'get_buffer'}({key!r})"


class _Writer:
    def __init__(self, state: list[tuple[str, str]]) -> None:
        self.state = {key: i for i, (key, _) in enumerate(state)}
        self.first_param = next((i for i, (_, kind) in enumerate(state) if kind == "param"), None)
        self.inputs: list[int] = []  # the positions forward passes, in the order of `in`
        self.tensors: set[str] = set()  # the names assigned so far
        self.ints: set[str] = set()

    def input(self, pos: int) -> int:
        if pos not in self.inputs:
            self.inputs.append(pos)
        return self.inputs.index(pos)

    def tensor_name(self, name: str) -> str:
        if name not in self.tensors:
            raise Untranslatable(name)
        return name

    def statement(self, line: str) -> str:
        try:
            tree = ast.parse(line)
        except SyntaxError:
            raise Untranslatable(line) from None
        if len(tree.body) != 1:
            raise Untranslatable(line)
        stmt = tree.body[0]
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return self._expression_statement(stmt.value, line)
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            raise Untranslatable(line)
        target, value = stmt.targets[0].id, stmt.value
        if target == "_dev":
            return f"  const c10::Device kc_dev = {self._device(value)};"
        if target == BATCH:
            self.ints.add(target)
            return f"  const int64_t {BATCH} = {self._int(value)};"
        if not _TENSOR.match(target):
            raise Untranslatable(line)
        declared = target in self.tensors
        self.tensors.add(target)
        return f"  {'' if declared else 'torch::Tensor '}{target} = {self._tensor(value)};"

    def _expression_statement(self, call: ast.Call, line: str) -> str:
        func = _dotted(call.func)
        if func == "_check_shapes":
            return "CHECK"
        if func == f"_ext.{BATCH_VAR}_set" and len(call.args) == 1:
            return f"  {BATCH_VAR}_set({self._int(call.args[0])});"
        kernel = func[len("_ext."):] if func and func.startswith("_ext.") else ""
        if _KERNEL.match(kernel) and len(call.args) == 1 and isinstance(call.args[0], ast.List) and not call.keywords:
            return f"  {kernel}({{{', '.join(self._tensor(a) for a in call.args[0].elts)}}});"
        raise Untranslatable(line)

    def _device(self, node: ast.expr) -> str:
        # `inputs[k].device`, or `next(self.parameters()).device` (the first parameter's)
        if isinstance(node, ast.Attribute) and node.attr == "device":
            if _dotted(node.value) is None and isinstance(node.value, ast.Subscript):
                return f"{self._tensor(node.value)}.device()"
            if self.first_param is not None and ast.unparse(node.value) == "next(self.parameters())":
                return f"st[{self.first_param}].device()"
        raise Untranslatable(ast.unparse(node))

    def _int(self, node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return f"{node.value}LL"
        if isinstance(node, ast.Name) and node.id in self.ints:
            return node.id
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"(-{self._int(node.operand)})"
        if isinstance(node, ast.BinOp):
            op = _INT_OPS.get(type(node.op))
            if op is None:
                raise Untranslatable(ast.unparse(node))
            return f"({self._int(node.left)} {op} {self._int(node.right)})"
        # `inputs[k].shape[d]`
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int):
            return f"{self._tensor(node.value.value)}.size({node.slice.value})"
        raise Untranslatable(ast.unparse(node))

    def _ints(self, nodes: list[ast.expr]) -> str:
        if len(nodes) == 1 and isinstance(nodes[0], ast.Tuple):
            nodes = list(nodes[0].elts)
        return "{" + ", ".join(self._int(n) for n in nodes) + "}"

    def _tensor(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            return self.tensor_name(node.id)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise Untranslatable(ast.unparse(node))

    def _subscript(self, node: ast.Subscript) -> str:
        if isinstance(node.value, ast.Name) and node.value.id == "inputs":
            if not (isinstance(node.slice, ast.Constant) and type(node.slice.value) is int):
                raise Untranslatable(ast.unparse(node))
            return f"in[{self.input(node.slice.value)}]"
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if all(isinstance(n, ast.Constant) and n.value is None for n in parts):  # x[None], x[None, None]: leading dims
            return self._tensor(node.value) + ".unsqueeze(0)" * len(parts)
        # x[(slice(None), ..., slice(start, end, step),)]: a slice of the last dim named
        out = self._tensor(node.value)
        for dim, part in enumerate(parts):
            if not (isinstance(part, ast.Call) and _dotted(part.func) == "slice" and not part.keywords):
                raise Untranslatable(ast.unparse(node))
            args = [None if isinstance(a, ast.Constant) and a.value is None else a for a in part.args]
            if args == [None]:
                continue
            start, end, step = (args + [None, None, None])[:3] if len(args) > 1 else (None, args[0], None)
            out += (f".slice({dim}, {'0LL' if start is None else self._int(start)}, "
                    f"{'INT64_MAX' if end is None else self._int(end)}, {'1LL' if step is None else self._int(step)})")
        return out

    def _call(self, node: ast.Call) -> str:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return self._state(node)
        name = _dotted(func)
        if name == "torch.empty":
            return self._empty(node)
        if name in _LIBRARY and not node.keywords and len(node.args) == _LIBRARY[name][1]:
            return f"{_LIBRARY[name][0]}({', '.join(self._tensor(a) for a in node.args)})"
        if name and _CONV.match(name) and not node.keywords:
            return self._conv(name.rsplit(".", 1)[1], node.args)
        if isinstance(func, ast.Attribute) and not node.keywords:
            base, method = self._tensor(func.value), func.attr
            if method in _LIST_METHODS:
                return f"{base}.{method}({self._ints(node.args)})"
            if _SCALAR_METHODS.get(method) == len(node.args):
                return f"{base}.{method}({', '.join(self._int(a) for a in node.args)})"
        raise Untranslatable(ast.unparse(node))

    def _state(self, node: ast.Call) -> str:
        func = node.func
        assert isinstance(func, ast.Attribute)
        key = node.args[0].value if len(node.args) == 1 and isinstance(node.args[0], ast.Constant) else None
        if func.attr not in ("get_parameter", "get_buffer") or key not in self.state:
            raise Untranslatable(ast.unparse(node))
        return f"st[{self.state[key]}]"

    def _empty(self, node: ast.Call) -> str:
        kw = {k.arg: k.value for k in node.keywords}
        dtype = _dotted(kw.get("dtype")) or ""
        if (len(node.args) != 1 or set(kw) != {"dtype", "device"} or _dotted(kw["device"]) != "_dev"
                or dtype.removeprefix("torch.") not in _DTYPES):
            raise Untranslatable(ast.unparse(node))
        ctype = _DTYPES[dtype.removeprefix("torch.")]
        return f"at::empty({self._ints([node.args[0]])}, at::TensorOptions().dtype({ctype}).device(kc_dev))"

    def _conv(self, fn: str, args: list[ast.expr]) -> str:
        # F.convNd(x, w, b, stride, padding, dilation, groups);
        # F.conv_transposeNd(x, w, b, stride, padding, output_padding, groups, dilation)
        want = 8 if fn.startswith("conv_transpose") else 7
        if len(args) != want:
            raise Untranslatable(fn)
        x, w = self._tensor(args[0]), self._tensor(args[1])
        b = ("std::optional<at::Tensor>()" if isinstance(args[2], ast.Constant) and args[2].value is None
             else self._tensor(args[2]))
        # typed lists: `{0LL, 0LL}` would also read as a string_view (0 is a null pointer), and
        # conv's padding has a string overload ("same", "valid")
        rest = [f"at::IntArrayRef({self._ints([a])})" if isinstance(a, ast.Tuple) else self._int(a) for a in args[3:]]
        return f"at::{fn}({', '.join([x, w, b, *rest])})"


def _dotted(node: ast.expr | None) -> str | None:
    """`a.b.c` for a chain of names, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None
