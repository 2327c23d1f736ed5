"""Decompositions of the normalizations into means and pointwise ops (imported in the capture
child only: it imports torch).

ATen's own decompositions of these ops go through prims.var, as_strided or repeat, which the
planner cannot lower; these express each one as the two-stage row reduction it is (a mean,
then the mean of squared deviations) plus a pointwise epilogue, which the planner fuses into
one kernel. Statistics use the biased variance, as the kernels they replace do.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def _moments(x: torch.Tensor, dims: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) * (x - mean)).mean(dims, keepdim=True)
    return mean, var


def layer_norm(x: torch.Tensor, shape: list[int], weight: Any, bias: Any, eps: float) -> Any:
    dims = list(range(x.dim() - len(shape), x.dim()))
    mean, var = _moments(x, dims)
    rstd = torch.rsqrt(var + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def group_norm(x: torch.Tensor, weight: Any, bias: Any, n: int, c: int, hw: int, groups: int, eps: float) -> Any:
    grouped = x.reshape(n, groups, (c // groups) * hw)
    mean, var = _moments(grouped, [2])
    rstd = torch.rsqrt(var + eps)
    out = ((grouped - mean) * rstd).reshape(x.shape)
    affine_shape = [c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(affine_shape)
    if bias is not None:
        out = out + bias.reshape(affine_shape)
    return out, mean.reshape(n, groups), rstd.reshape(n, groups)


def batch_norm(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,
               training: bool, momentum: float, eps: float) -> Any:
    """Batch statistics when training (or without running stats), else the running ones.
    The running-stat update is a side effect on buffers that no output depends on."""
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    if training or running_mean is None:
        mean, var = _moments(x, [0] + list(range(2, x.dim())))
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    rstd = torch.rsqrt(var + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out, mean.reshape(-1), rstd.reshape(-1)


def instance_norm(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                  use_input_stats: bool, momentum: float, eps: float, cudnn_enabled: bool) -> Any:
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    if use_input_stats or running_mean is None:
        mean, var = _moments(x, list(range(2, x.dim())))
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    out = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _legit(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,
           training: bool, momentum: float, eps: float) -> Any:
    return batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


def _legit_no_stats(x: torch.Tensor, weight: Any, bias: Any, training: bool, momentum: float, eps: float) -> Any:
    return batch_norm(x, weight, bias, None, None, True, momentum, eps)


def _functional(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                training: bool, momentum: float, eps: float) -> Any:
    out, mean, rstd = batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, mean, rstd, running_mean, running_var


def vector_norm(x: torch.Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    """|x|_p over `dim` as a sum (or max/min for +-inf) of |x|^p: a row reduction."""
    dims = list(range(x.dim())) if dim is None or dim == [] else dim
    a = x.abs()
    if ord == float("inf"):
        return a.amax(dims, keepdim=keepdim)
    if ord == float("-inf"):
        return a.amin(dims, keepdim=keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(dims, keepdim=keepdim)
    if ord == 1:
        return a.sum(dims, keepdim=keepdim)
    if ord == 2:
        return torch.sqrt((x * x).sum(dims, keepdim=keepdim))
    return torch.pow(torch.pow(a, ord).sum(dims, keepdim=keepdim), 1.0 / ord)


class PythonLevel(torch.overrides.TorchFunctionMode):
    """instance_norm is decomposed by ATen itself before a decomposition table sees it (into a
    `repeat` of the weights, a copy): replace it where Python calls it."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.instance_norm:
            return instance_norm(*args, **kwargs)
        if func is torch.nn.functional.instance_norm:
            import inspect

            bound = inspect.signature(func).bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            return instance_norm(a["input"], a["weight"], a["bias"], a["running_mean"], a["running_var"],
                                 a["use_input_stats"], a["momentum"], a["eps"], False)
        return func(*args, **kwargs)


def table() -> dict[Any, Any]:
    return {
        aten.native_layer_norm.default: layer_norm,
        aten.linalg_vector_norm.default: vector_norm,
        aten.native_group_norm.default: group_norm,
        aten.native_batch_norm.default: batch_norm,
        aten._native_batch_norm_legit.default: _legit,
        aten._native_batch_norm_legit.no_stats: _legit_no_stats,
        aten._native_batch_norm_legit_functional.default: _functional,
        aten._native_batch_norm_legit_no_training.default:
            lambda x, w, b, rm, rv, m, eps: batch_norm(x, w, b, rm, rv, False, m, eps),
    }
