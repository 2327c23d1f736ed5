"""Run-time op policy while ModelNew.forward runs: the candidate computes with its own kernels.

Two layers, both active during guarded calls:
- `FunctionGuard` (a TorchFunctionMode) sees Python-level torch calls: torch.*, F.*, Tensor
  methods, `.numpy()`/`.item()` round trips.
- `DispatchGuard` (a TorchDispatchMode) sees every ATen op that reaches the dispatcher,
  including ops called from C++ inside the candidate's extension (torch::relu, at::mm ...).
Allowed: allocation, views/reshapes, metadata, and (only with --allow) the GEMM/conv
library ops. Everything else is recorded as a violation naming the op and the candidate line
that led to it; the violation is recorded even if the candidate swallows the exception.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

# Python-level names (Tensor method/property or torch function, last dotted part).
_META = {
    "shape", "size", "dim", "ndim", "ndimension", "numel", "nelement", "stride",
    "storage_offset", "dtype", "device", "layout", "is_contiguous", "is_cuda", "is_cpu",
    "is_floating_point", "is_complex", "data_ptr", "element_size", "nbytes", "itemsize",
    "requires_grad", "is_leaf", "get_device", "__len__", "data", "is_sparse", "is_quantized",
    "is_meta", "names", "grad_fn", "dim_order",
}
_VIEWS = {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze",
    "permute", "transpose", "swapaxes", "swapdims", "t", "T", "mT", "expand", "expand_as",
    "narrow", "select", "unbind", "split", "chunk", "tensor_split", "movedim", "moveaxis",
    "detach", "as_strided", "unfold", "diagonal", "contiguous", "__getitem__", "view_as_real",
    "view_as_complex", "requires_grad_",
}
_ALLOC = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "zero_", "fill_",
}
# No-op when dtype/device already match; a real conversion is refused at the dispatcher.
_CONVERSIONS = {"to", "cuda", "cpu", "float", "type_as"}
_FN_GEMM = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "mv", "addmv", "dot",
            "__matmul__", "__rmatmul__", "_addmm_activation"}  # the last: cuBLASLt's bias + ReLU/GELU epilogue
_FN_CONV = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
            "conv_transpose3d", "convolution"}

# ATen op packet names.
_ATEN_OK = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "zero_", "fill_", "resize_", "view", "_unsafe_view", "_reshape_alias", "alias",
    "as_strided", "slice", "select", "t", "transpose", "permute", "expand", "squeeze",
    "unsqueeze", "unbind", "split", "split_with_sizes", "chunk", "narrow", "detach",
    "lift_fresh", "diagonal", "unfold", "view_as_real", "view_as_complex", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "reshape", "flatten",
    "unflatten", "movedim", "expand_as", "view_as", "reshape_as", "contiguous",
}
_ATEN_GEMM = {"mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "dot", "_addmm_activation",
              "matmul", "linear"}
_ATEN_CONV = {"convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose",
              "mkldnn_convolution", "convolution_overrideable", "conv1d", "conv2d", "conv3d",
              "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "_conv_depthwise2d",
              "_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_transpose2d",
              "slow_conv_transpose3d", "_nnpack_spatial_convolution", "slow_conv_dilated2d",
              "slow_conv_dilated3d", "cudnn_convolution_relu", "cudnn_convolution_add_relu"}
# Namespaces of torch's own kernels; an op in any other namespace is the candidate's own.
_TORCH_NAMESPACES = {"aten", "prims", "quantized", "_quantized", "mkldnn", "torchvision",
                     "_c10d_functional", "c10d", "inductor", "quantized_decomposed", "rngprims"}


@dataclass
class Violation:
    op: str
    layer: str  # "python" or "c++"
    where: str

    def describe(self) -> str:
        origin = "from C++ extension code" if self.layer == "c++" else "in Python"
        return f"torch op `{self.op}` called {origin} inside ModelNew.forward ({self.where})"


@dataclass
class Guard:
    """Refuses torch compute inside guarded calls. Use `with guard.active():`."""

    candidate_file: str
    allow: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.fn_ok = _META | _VIEWS | _ALLOC | _CONVERSIONS
        self.aten_ok = set(_ATEN_OK)
        if "gemm" in self.allow:
            self.fn_ok |= _FN_GEMM
            self.aten_ok |= _ATEN_GEMM
        if "conv" in self.allow:
            self.fn_ok |= _FN_CONV
            self.aten_ok |= _ATEN_CONV
        self._python_depth = 0
        self._in_dispatch = 0

    def where(self) -> str:
        """The innermost line of the candidate file on the current Python stack."""
        for frame in reversed(traceback.extract_stack()):
            if frame.filename == self.candidate_file:
                return f"{_short(frame.filename)}:{frame.lineno}: {(frame.line or '').strip()}"
        return "outside the candidate file"

    def refuse(self, op: str, layer: str) -> None:
        violation = Violation(op, layer, self.where())
        self.violations.append(violation)
        raise GuardViolation(violation.describe())

    def active(self) -> Any:
        from contextlib import ExitStack

        stack = ExitStack()
        function_guard, dispatch_guard = _modes()
        stack.enter_context(dispatch_guard(self))
        stack.enter_context(function_guard(self))
        return stack


class GuardViolation(RuntimeError):
    """Raised inside the candidate when it calls a refused torch op."""


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _fn_name(func: Any) -> str:
    from torch.overrides import resolve_name

    if hasattr(func, "overloadpacket"):  # torch.ops.aten.exp.default: its own name (not "aten.exp.exp.default")
        return str(func)
    name = resolve_name(func) or getattr(func, "__name__", repr(func))
    if name.endswith(".__get__") or name.endswith(".__set__"):
        return name.rsplit(".", 1)[0]
    own = getattr(func, "__name__", None)
    if own and own != name.rsplit(".", 1)[-1] and "." in name:
        # resolve_name reports some functions under an alias (torch.mm as torch.spmm)
        name = f"{name.rsplit('.', 1)[0]}.{own}"
    return name


def _make_modes() -> tuple[type, type]:
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class FunctionGuard(TorchFunctionMode):
        def __init__(self, guard: Guard) -> None:
            super().__init__()
            self.guard = guard

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if self.guard._in_dispatch:  # an op the dispatcher guard already judged
                return func(*args, **kwargs)
            full = _fn_name(func)
            short = full.rsplit(".", 1)[-1]
            if hasattr(func, "overloadpacket"):  # torch.ops.aten.x.default called from Python
                short = func.overloadpacket.__name__
            elif full.startswith(("aten.", "prims.")):
                short = full.split(".")[1]
            if short not in self.guard.fn_ok or (short == "__getitem__" and _tensor_index(args)):
                self.guard.refuse(full, "python")
            self.guard._python_depth += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.guard._python_depth -= 1

    class DispatchGuard(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ in dynamo's "disable", whose first call imports
            # torch._dynamo: 1.2-1.4 s of every candidate process's first guarded call. Nothing compiles
            # under the guard (the static rules refuse torch.compile), so the wrapper has nothing to do.
            return False

        def __init__(self, guard: Guard) -> None:
            super().__init__()
            self.guard = guard

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            namespace = getattr(func, "namespace", "aten")
            packet = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            if namespace in _TORCH_NAMESPACES and packet not in self.guard.aten_ok:
                layer = "python" if self.guard._python_depth else "c++"
                self.guard.refuse(f"{namespace}.{packet}", layer)
            self.guard._in_dispatch += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.guard._in_dispatch -= 1

    return FunctionGuard, DispatchGuard


def _tensor_index(args: tuple) -> bool:
    """Indexing with a tensor is a gather (compute), not a view."""
    import torch

    if len(args) < 2:
        return False
    index = args[1] if isinstance(args[1], tuple) else (args[1],)
    return any(isinstance(i, torch.Tensor) or isinstance(i, list) for i in index)


_MODES: tuple[type, type] | None = None


def _modes() -> tuple[type, type]:
    """(FunctionGuard, DispatchGuard) classes, built on first use so importing stays light."""
    global _MODES
    if _MODES is None:
        _MODES = _make_modes()
    return _MODES
