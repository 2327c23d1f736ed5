"""Forward's generated steps, run without exec: a small interpreter over the few forms the
planner writes (allocation, views, library calls, kernel calls), for geometry.py, which runs
them on meta tensors in the optimize process.

The steps are text that the planner built from a captured graph, and the graph came from a
child that ran the problem file: even with a validated graph (schema.py), that text is never
handed to Python's exec. Each statement is parsed (ast) and only these are carried out:
`NAME = expr` and `_ext.KERNEL([...])`, where expr uses the names of the scope, numbers, strings,
tuples and lists, `slice(...)`, subscripts of tensors, the view and allocation methods of
VIEW_METHODS on tensors, the torch functions of TORCH_FUNCTIONS and torch's dtypes. Anything
else raises StepError, naming the step.
"""

from __future__ import annotations

import ast
from typing import Any

# Methods of a tensor a step may call: views and metadata (no data is read on meta tensors).
VIEW_METHODS = frozenset({
    "view", "reshape", "expand", "expand_as", "permute", "transpose", "t", "unsqueeze", "squeeze",
    "select", "narrow", "unfold", "flatten", "unflatten", "movedim", "as_strided", "diagonal",
    "contiguous", "view_as", "split", "chunk", "unbind", "size", "stride", "dim",
})
# torch functions a step may call: allocation and the library ops forward may keep.
TORCH_FUNCTIONS = frozenset({
    "torch.empty", "torch.empty_strided", "torch.zeros", "torch.empty_like", "torch.mm", "torch.bmm",
    "torch.matmul", "torch.addmm", "torch.nn.functional.linear",
    *(f"torch.nn.functional.conv{n}d" for n in (1, 2, 3)),
    *(f"torch.nn.functional.conv_transpose{n}d" for n in (1, 2, 3)),
})
OWNER_METHODS = frozenset({"get_parameter", "get_buffer"})


class StepError(ValueError):
    """A generated step outside the interpreter's forms (a kcoder bug)."""


def run_steps(lines: list[str], scope: dict[str, Any], owner: Any, kernels: Any) -> dict[str, Any]:
    """Carry out `lines` (forward's steps, one statement each) with the names of `scope`;
    `self.get_parameter/get_buffer(...)` go to `owner`, `_ext.NAME([...])` to `kernels`.
    Returns the scope with every name the steps assigned."""
    names = dict(scope)
    for line in lines:
        try:
            tree = ast.parse(line, mode="exec")
        except SyntaxError:
            raise StepError(f"generated step is not Python: {line[:200]!r}") from None
        for stmt in tree.body:
            _statement(stmt, names, owner, kernels, line)
    return names


def _statement(stmt: ast.stmt, names: dict[str, Any], owner: Any, kernels: Any, line: str) -> None:
    run = _Evaluator(names, owner, kernels, line)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        names[stmt.targets[0].id] = run.value(stmt.value)
    elif isinstance(stmt, ast.Expr) and _is_kernel_call(stmt.value):
        run.value(stmt.value)
    else:
        raise StepError(f"generated step of an unknown form: {line[:200]!r}")


def _is_kernel_call(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "_ext")


def _dotted(node: ast.expr) -> str | None:
    """`torch.nn.functional.conv2d` as text, or None when `node` is not a dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


class _Evaluator:
    def __init__(self, names: dict[str, Any], owner: Any, kernels: Any, line: str) -> None:
        self.names, self.owner, self.kernels, self.line = names, owner, kernels, line

    def fail(self, what: str) -> StepError:
        return StepError(f"generated step not understood ({what}): {self.line[:200]!r}")

    def value(self, node: ast.expr) -> Any:
        import torch

        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self.value(node.operand)
            if isinstance(operand, (int, float)) and not isinstance(operand, bool):
                return -operand
            raise self.fail("negation of a non-number")
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.value(e) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Name):
            if node.id in self.names and node.id not in ("torch", "self", "_ext"):
                return self.names[node.id]
            raise self.fail(f"name {node.id}")
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.value(p) for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Subscript):
            base = self.value(node.value)
            if not isinstance(base, (torch.Tensor, list, tuple)):
                raise self.fail("subscript of something that is no tensor or list")
            return base[self.value(node.slice)]
        if isinstance(node, ast.Attribute):  # not called: only torch's dtypes
            name = _dotted(node)
            found = getattr(torch, name[6:], None) if name and name.startswith("torch.") and \
                name.count(".") == 1 else None
            if isinstance(found, torch.dtype):
                return found
            raise self.fail(f"attribute {name or node.attr}")
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(type(node).__name__)

    def call(self, node: ast.Call) -> Any:
        import torch

        args = [self.value(a) for a in node.args if not isinstance(a, ast.Starred)]
        if len(args) != len(node.args) or any(k.arg is None for k in node.keywords):
            raise self.fail("starred arguments")
        kwargs = {k.arg: self.value(k.value) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Name) and func.id == "slice" and not kwargs:
            return slice(*args)
        name = _dotted(func)
        if name in TORCH_FUNCTIONS:
            target: Any = torch
            for part in name.split(".")[1:]:
                target = getattr(target, part)
            return target(*args, **kwargs)
        if not isinstance(func, ast.Attribute):
            raise self.fail(f"call of {name or type(func).__name__}")
        if isinstance(func.value, ast.Name) and func.value.id == "self" and func.attr in OWNER_METHODS:
            return getattr(self.owner, func.attr)(*args, **kwargs)
        if isinstance(func.value, ast.Name) and func.value.id == "_ext":
            return getattr(self.kernels, func.attr)(*args, **kwargs)
        base = self.value(func.value)
        if isinstance(base, torch.Tensor) and func.attr in VIEW_METHODS:
            return getattr(base, func.attr)(*args, **kwargs)
        raise self.fail(f"method {func.attr}")
