"""The op sequences of a KernelBench checkout's problems, read statically (never executed), so
that `kcoder synth` can drop a composition KernelBench already has.

A problem's sequence is the ops its Model.forward applies, in evaluation order: calls
(torch.relu, F.gelu, x.sum(...), self.conv(...) named by the module __init__ assigned to it) and
arithmetic (x * s is "mul", x + b is "add"), minus views and metadata (view, reshape, size ...).
Names compare by `canon`: lower case without underscores or a "Loss" ending, so nn.LeakyReLU
and F.leaky_relu are one op, as are nn.MSELoss and F.mse_loss. kcoder synth reads its own
rendered files the same way, so both sides of the comparison come from one reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

_ARITH = {ast.Mult: "mul", ast.Add: "add", ast.Sub: "sub", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow"}
_NOT_OPS = {"view", "reshape", "size", "contiguous", "permute", "transpose", "flatten", "unsqueeze", "squeeze",
            "expand", "to", "float", "half", "dim", "type", "cuda", "cpu", "clone", "detach", "super"}
_ALIASES = {"amax": "max", "amin": "min"}
_BUILTIN_NAMES = {"min", "max", "abs", "len", "range", "int", "float", "tuple", "list", "getattr", "isinstance"}


def canon(name: str) -> str:
    """nn.MSELoss, F.mse_loss -> "mse"; torch.amax -> "max" (what KernelBench writes as torch.max)."""
    short = name.split(".")[-1].lower().replace("_", "")
    short = short[:-4] if short.endswith("loss") and len(short) > 4 else short
    return _ALIASES.get(short, short)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _modules(cls: ast.ClassDef) -> dict[str, str]:
    """self.<attr> = nn.<Module>(...) assignments of the class: attr -> module name."""
    found: dict[str, str] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and _dotted(target.value) == "self":
                    found[target.attr] = _dotted(node.value.func)
    return found


def _walk(node: ast.AST, modules: dict[str, str], out: list[str]) -> None:
    """Post-order: a call's arguments are evaluated before the call itself."""
    for child in ast.iter_child_nodes(node):
        _walk(child, modules, out)
    name = ""
    if isinstance(node, ast.Call):
        dotted = _dotted(node.func)
        if dotted.startswith("self.") and dotted.count(".") == 1:
            name = modules.get(dotted[5:], "")
        elif not (isinstance(node.func, ast.Name) and node.func.id in _BUILTIN_NAMES):
            name = dotted.rsplit(".", 1)[-1]
    elif isinstance(node, ast.BinOp):
        name = _ARITH.get(type(node.op), "")
    elif isinstance(node, ast.AugAssign):
        name = _ARITH.get(type(node.op), "")
    if name and name.split(".")[-1] not in _NOT_OPS:
        out.append(canon(name))


def op_sequence(source: str) -> list[str] | None:
    """The canonical op sequence of a problem's Model.forward (None: no Model.forward)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            forward = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
            if forward is None:
                return None
            out: list[str] = []
            for stmt in forward.body:
                _walk(stmt, _modules(node), out)
            return out
    return None


def kernelbench_sequences(checkout: Path) -> dict[tuple[str, ...], str]:
    """Every level*/ problem's op sequence -> its path (relative to the checkout).
    ValueError when the folder holds no KernelBench levels."""
    root = checkout / "KernelBench" if (checkout / "KernelBench").is_dir() else checkout
    files = sorted(root.glob("level*/*.py"))
    if not files:
        raise ValueError(f"{checkout}: not a KernelBench checkout (no level*/*.py under it or its KernelBench/)")
    sequences: dict[tuple[str, ...], str] = {}
    for path in files:
        seq = op_sequence(path.read_text(errors="replace"))
        if seq:
            sequences.setdefault(tuple(seq), str(path.relative_to(root)))
    return sequences
