"""A composition of 1-5 catalogue ops, drawn from a seed, rendered as a KernelBench file.

Everything here is a function of the seed (and the device's nominal rates): the batch size
comes from a cost estimate aimed at the middle of the eager-time range (on a log scale), and
the checker (synth_check.py) then keeps only what really lands in it, so the files written for
a seed never depend on a measurement.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from math import prod

from kcoder.env.catalogue import CATALOGUE, Op, Shape, Step, fits

# Nominal eager rates (bytes/s of fp32 traffic, FLOP/s, seconds per op launch): an estimate
# within a few times is all the batch choice needs.
RATES = {"cpu": (8e9, 3e9, 2e-5), "cuda": (1.5e12, 2e13, 1e-5)}
MAX_TENSOR_BYTES = {"cpu": 256 * 2**20, "cuda": 1024 * 2**20}
MAX_BATCH = 1 << 16


@dataclass
class Composition:
    """The ops in order, the input's shape (without batch), and the batch size."""

    steps: list[Step]
    input_shape: Shape
    batch: int = 1
    extra_inputs: list[str] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return [s.op for s in self.steps]



def draw(rng: random.Random, ops: dict[str, Op] | None = None, max_ops: int = 5) -> Composition:
    """A random composition of 1..max_ops ops from `ops` (default the whole catalogue)."""
    ops = ops or CATALOGUE
    heads = [o for o in ops.values() if o.head]
    length = rng.randint(1, max_ops)
    if heads and rng.random() < 0.5:
        head = rng.choice(heads)
        shape: Shape = (rng.choice([256, 512, 1024, 2048]),) if head.name == "linear" else \
            (rng.choice([3, 8, 16, 32]),) + (rng.choice([16, 32, 64]),) * 2
        steps = [head.make(rng, shape, 0)]
    else:
        shape = rng.choice([(rng.choice([256, 512, 1024, 2048, 4096]),),
                            (rng.choice([8, 16, 32, 64]),) + (rng.choice([16, 32, 64, 128]),) * 2])
        steps = []
    input_shape = shape
    body = [o for o in ops.values() if not o.head]
    while len(steps) < length and not (steps and steps[-1].terminal):
        now = steps[-1].shape if steps else input_shape
        choices = [o for o in body if fits(o, now) and (o.family != "loss" or len(steps) == length - 1)]
        if not choices:
            break
        steps.append(rng.choice(choices).make(rng, now, len(steps)))
    if not steps:
        raise ValueError("no op of the catalogue fits this input: the catalogue needs a pointwise op")
    comp = Composition(steps, input_shape)
    comp.extra_inputs = [i for s in steps for i in s.inputs]
    return comp


def estimate_s(comp: Composition, device: str, batch: int = 1) -> float:
    """The eager time of `comp` at `batch`, by the nominal rates."""
    bandwidth, flops, launch = RATES[device]
    per_row = sum(4 * s.elems / bandwidth + s.flops / flops for s in comp.steps)
    return batch * per_row + launch * len(comp.steps)


def choose_batch(comp: Composition, device: str, lo_ms: float, hi_ms: float) -> int:
    """The power-of-two batch whose estimated time is nearest the range's log-middle, within
    the per-tensor memory cap."""
    target = math.sqrt(lo_ms * hi_ms) / 1e3
    bandwidth, flops, launch = RATES[device]
    per_row = max(estimate_s(comp, device, 1) - launch * len(comp.steps), 1e-12)
    batch = 2 ** round(math.log2(max(1.0, (target - launch * len(comp.steps)) / per_row)))
    widest = max([prod(comp.input_shape)] + [prod(s.shape) for s in comp.steps])
    while batch > 1 and 4 * batch * widest > MAX_TENSOR_BYTES[device]:
        batch //= 2
    return max(1, min(batch, MAX_BATCH))


def render(comp: Composition, title: str) -> str:
    """The KernelBench-format problem file for `comp`."""
    init = [s.init for s in comp.steps if s.init] or ["pass"]
    extra = [f"y{k}" for k, s in enumerate(comp.steps) for _ in s.inputs]
    inputs = ["torch.randn({B}" + "".join(f", {d}" for d in comp.input_shape) + ")"] + comp.extra_inputs
    lines = [f'"""{title}: {" -> ".join(comp.ops)}."""', "", "import torch", "import torch.nn as nn",
             "import torch.nn.functional as F", "", "", "class Model(nn.Module):",
             "    def __init__(self):", "        super().__init__()", *[f"        {i}" for i in init], "",
             f"    def forward(self, {', '.join(['x', *extra])}):", *[f"        {s.forward}" for s in comp.steps],
             "        return x", "", "", f"batch_size = {comp.batch}", "", "", "def get_inputs():",
             "    return [" + ", ".join(i.replace("{B}", "batch_size") for i in inputs) + "]", "", "",
             "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines)
