"""The torch ops `kcoder synth` composes: the families kcoder's policy and KernelBench cover
(GEMM/conv heads, pointwise, reductions, softmax, norms, pooling, scans, losses).

An op turns the tensor `x` of one shape into another. Shapes are [B, F] or [B, C, H, W] with a
symbolic batch B (chosen last, from the cost estimate), so an op says which ranks it takes,
its module line (if it has parameters), its forward line, the shape it leaves, extra inputs it
needs, and its cost per batch row (elements read and written, FLOPs).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod

Shape = tuple[int, ...]  # without the batch dim


@dataclass
class Step:
    """One op placed in a composition."""

    op: str
    forward: str
    shape: Shape
    init: str = ""
    inputs: list[str] = field(default_factory=list)  # extra get_inputs() entries, "{B}" = batch
    elems: float = 0.0  # elements read + written per batch row
    flops: float = 0.0  # per batch row
    terminal: bool = False  # a loss: the composition ends here


@dataclass(frozen=True)
class Op:
    name: str
    family: str
    ranks: tuple[int, ...]
    make: Callable[[random.Random, Shape, int], Step]
    head: bool = False  # GEMM/conv: only first, it sets the input shape itself


def _pointwise(name: str, expr: str) -> Op:
    def make(rng: random.Random, shape: Shape, k: int) -> Step:
        return Step(name, f"x = {expr}", shape, elems=2 * prod(shape), flops=prod(shape))

    return Op(name, "pointwise", (1, 2, 4), make)


def _scale(rng: random.Random, shape: Shape, k: int) -> Step:
    c = rng.choice([0.5, 2.0, 1.5, -1.0, 3.0])
    return Step("scale", f"x = x * {c}", shape, elems=2 * prod(shape), flops=prod(shape))


def _bias(rng: random.Random, shape: Shape, k: int) -> Step:
    pshape = (shape[0],) + (1,) * (len(shape) - 1)
    return Step("bias", f"x = x + self.p{k}", shape, init=f"self.p{k} = nn.Parameter(torch.randn{pshape})",
                elems=2 * prod(shape), flops=prod(shape))


def _binary(name: str, symbol: str) -> Op:
    def make(rng: random.Random, shape: Shape, k: int) -> Step:
        return Step(name, f"x = x {symbol} y{k}", shape, inputs=[_randn(shape)],
                    elems=3 * prod(shape), flops=prod(shape))

    return Op(name, "pointwise", (1, 2, 4), make)


def _reduce(name: str) -> Op:
    def make(rng: random.Random, shape: Shape, k: int) -> Step:
        dim = rng.randrange(len(shape)) + 1
        keep = rng.random() < 0.5
        out = tuple(1 if i + 1 == dim else s for i, s in enumerate(shape)) if keep else \
            tuple(s for i, s in enumerate(shape) if i + 1 != dim)
        return Step(name, f"x = torch.{name}(x, dim={dim}, keepdim={keep})",
                    out, elems=prod(shape) + prod(out), flops=prod(shape))

    return Op(name, "reduction", (2, 4), make)


def _along(name: str, family: str) -> Op:
    """An op along one dim that keeps the shape (softmax, log_softmax, cumsum)."""

    def make(rng: random.Random, shape: Shape, k: int) -> Step:
        dim = rng.randrange(len(shape)) + 1
        return Step(name, f"x = torch.{name}(x, dim={dim})", shape, elems=3 * prod(shape),
                    flops=4 * prod(shape))

    return Op(name, family, (2, 4), make)


def _module(name: str, family: str, ranks: tuple[int, ...], module: Callable[[Shape], str],
            out: Callable[[Shape], Shape] = lambda s: s) -> Op:
    def make(rng: random.Random, shape: Shape, k: int) -> Step:
        new = out(shape)
        return Step(name, f"x = self.m{k}(x)", new, init=f"self.m{k} = {module(shape)}",
                    elems=2 * prod(shape) + prod(new), flops=5 * prod(shape))

    return Op(name, family, ranks, make)


def _rms_norm(rng: random.Random, shape: Shape, k: int) -> Step:
    return Step("rms_norm", "x = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6)", shape,
                elems=3 * prod(shape), flops=4 * prod(shape))


def _loss(name: str, target: str = "randn") -> Op:
    def make(rng: random.Random, shape: Shape, k: int) -> Step:
        if target == "classes":
            return Step(name, f"x = F.{name}(x, y{k})", (), inputs=[f"torch.randint(0, {shape[0]}, ({{B}},))"],
                        elems=2 * prod(shape), flops=4 * prod(shape), terminal=True)
        return Step(name, f"x = F.{name}(x, y{k})", (), inputs=[_randn(shape)], elems=3 * prod(shape),
                    flops=3 * prod(shape), terminal=True)

    return Op(name, "loss", (2,) if target == "classes" else (1, 2, 4), make)


def _linear(rng: random.Random, shape: Shape, k: int) -> Step:
    fin, fout = shape[0], rng.choice([256, 512, 1024, 2048])
    return Step("linear", f"x = self.m{k}(x)", (fout,), init=f"self.m{k} = nn.Linear({fin}, {fout})",
                elems=fin + fout, flops=2 * fin * fout)


def _conv2d(rng: random.Random, shape: Shape, k: int) -> Step:
    cin, h, w = shape
    cout, ks = rng.choice([16, 32, 64]), rng.choice([1, 3, 5])
    new = (cout, h - ks + 1, w - ks + 1)
    return Step("conv2d", f"x = self.m{k}(x)", new, init=f"self.m{k} = nn.Conv2d({cin}, {cout}, {ks})",
                elems=prod(shape) + prod(new), flops=2 * cin * ks * ks * prod(new))


def _pool(name: str, module: str, factor: int | None) -> Op:
    def out(s: Shape) -> Shape:
        return (s[0], 1, 1) if factor is None else (s[0], s[1] // factor, s[2] // factor)

    return _module(name, "pooling", (4,), lambda s: module, out)


def _randn(shape: Shape) -> str:
    return "torch.randn({B}" + "".join(f", {s}" for s in shape) + ")"


CATALOGUE: dict[str, Op] = {op.name: op for op in [
    Op("linear", "gemm", (2,), _linear, head=True), Op("conv2d", "conv", (4,), _conv2d, head=True),
    _pointwise("relu", "torch.relu(x)"), _pointwise("gelu", "F.gelu(x)"), _pointwise("sigmoid", "torch.sigmoid(x)"),
    _pointwise("tanh", "torch.tanh(x)"), _pointwise("silu", "F.silu(x)"),
    _pointwise("leaky_relu", "F.leaky_relu(x, 0.1)"), _pointwise("hardswish", "F.hardswish(x)"),
    _pointwise("softplus", "F.softplus(x)"), _pointwise("elu", "F.elu(x)"), _pointwise("mish", "F.mish(x)"),
    _pointwise("abs", "torch.abs(x)"), _pointwise("clamp", "torch.clamp(x, -0.5, 0.5)"),
    _pointwise("square", "x * x"), Op("scale", "pointwise", (1, 2, 4), _scale),
    Op("bias", "pointwise", (2, 4), _bias), _binary("mul_input", "*"), _binary("add_input", "+"),
    _reduce("sum"), _reduce("mean"), _reduce("amax"), _reduce("logsumexp"),
    _along("softmax", "softmax"), _along("log_softmax", "softmax"), _along("cumsum", "scan"),
    _module("layer_norm", "norm", (2,), lambda s: f"nn.LayerNorm({s[0]})"),
    _module("batch_norm", "norm", (4,), lambda s: f"nn.BatchNorm2d({s[0]})"),
    _module("group_norm", "norm", (4,), lambda s: f"nn.GroupNorm({_groups(s[0])}, {s[0]})"),
    _module("instance_norm", "norm", (4,), lambda s: f"nn.InstanceNorm2d({s[0]})"),
    Op("rms_norm", "norm", (2,), _rms_norm),
    _pool("max_pool2d", "nn.MaxPool2d(2)", 2), _pool("avg_pool2d", "nn.AvgPool2d(2)", 2),
    _pool("adaptive_avg_pool2d", "nn.AdaptiveAvgPool2d(1)", None),
    _loss("mse_loss"), _loss("smooth_l1_loss"), _loss("l1_loss"), _loss("cross_entropy", "classes"),
]}


def _groups(channels: int) -> int:
    return next(g for g in (8, 4, 2, 1) if channels % g == 0)


def fits(op: Op, shape: Shape) -> bool:
    """Whether `op` takes `shape` (pooling needs room to halve; norms need more than one value)."""
    if len(shape) + 1 not in op.ranks:
        return False
    if op.family == "pooling":
        return len(shape) == 3 and shape[1] >= 4 and shape[2] >= 4
    if op.family in ("norm", "softmax", "reduction", "scan"):
        return prod(shape) > 1
    return True
