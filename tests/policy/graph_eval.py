"""A reference interpreter of the policy's Graph in torch (tests only): what the planner's kernels
compute, op by op, so that a rewritten graph can be checked against eager without any build."""

from __future__ import annotations

from typing import Any

import torch

from kcoder.policy.nodes import Graph, Node, Ref
from kcoder.policy.plan import _view_suffix


def _value(env: dict[str, Any], arg: Any) -> Any:
    if isinstance(arg, Ref):
        return env[arg.name]
    if isinstance(arg, list):
        return [_value(env, a) for a in arg]
    return arg


def _tensor(v: Any) -> torch.Tensor:
    return v if isinstance(v, torch.Tensor) else torch.as_tensor(v)


def _pointwise(node: Node, args: list[Any]) -> torch.Tensor:
    dtype = getattr(torch, node.dtype.replace("torch.", ""))
    if node.op == "const":
        return torch.full(node.shape, args[0], dtype=dtype)
    if node.op == "cast":
        return _tensor(args[0]).to(dtype)
    fn = getattr(torch, node.op, None) or getattr(torch.nn.functional, node.op)
    first, *rest = args
    out = fn(_tensor(first), *rest, **node.attrs)
    return out.to(dtype)


def _reduce(node: Node, x: torch.Tensor) -> torch.Tensor:
    dims, keep = node.attrs["dims"], node.attrs["keepdim"]
    if node.op == "sum":
        return x.sum(dims, keepdim=keep)
    if node.op in ("max", "min"):
        return (x.amax if node.op == "max" else x.amin)(dims, keepdim=keep)
    if node.op == "prod":
        for d in sorted(dims, reverse=True):
            x = x.prod(d, keepdim=keep)
        return x
    return getattr(x, node.op)(dims[0], keepdim=keep)  # argmax, argmin


def _library(node: Node, args: list[Any]) -> torch.Tensor:
    if node.op in ("mm", "bmm"):
        return getattr(torch, node.op)(args[0], args[1])
    if node.op in ("addmm", "_addmm_activation"):
        return getattr(torch, node.op)(args[0], args[1], args[2])
    return torch.convolution(*args[:9])


def evaluate(g: Graph, inputs: list[Any], state: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The graph's outputs for `inputs` (forward's arguments) and `state` (parameters and buffers
    by state-dict name)."""
    env: dict[str, Any] = {}

    def value(name: str) -> Any:
        if name not in env:
            node = g.nodes[name]
            for ref in node.refs():
                value(ref)
            args = _value(env, node.args)
            if node.kind == "source":
                env[name] = inputs[node.attrs["key"]] if node.op == "input" else state[node.attrs["key"]]
            elif node.kind == "pw":
                env[name] = _pointwise(node, args)
            elif node.kind == "reduce":
                env[name] = _reduce(node, args[0])
            elif node.kind == "view":
                env[name] = eval("x" + _view_suffix(node, g), {"x": args[0], "torch": torch})  # noqa: S307
            elif node.kind == "lib":
                env[name] = _library(node, args)
            else:
                raise NotImplementedError(f"{node.kind} {node.op}")
        return env[name]

    return [value(o.name) if isinstance(o, Ref) else o for o in g.outputs]
