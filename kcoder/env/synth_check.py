"""The checks of one synthesized problem, in a child process of its own (a composition that
crashes, hangs or eats memory ends only that process).

`python -m kcoder.env.synth_check SPEC.json RESULT.json`; SPEC: {"path", "device", "seed",
"min_ms", "max_ms"}. The problem must run; give the same output twice for one seed (weights
and inputs); give an output that is finite, not the same for other inputs (constant) and not
equal to one of its inputs; and take min_ms..max_ms in eager mode (median of timed calls after
warm-up). RESULT: {"ok", "reason", "eager_ms", "output_shape", "input_shapes"}.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

TIMED_CALLS, TIME_BUDGET_S = 10, 3.0


class Rejected(Exception):
    """The problem fails a check; str() says which."""


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("kcoder_synth_problem", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(module: Any, device: str, weight_seed: int, input_seed: int) -> tuple[Any, list[Any], Any]:
    import torch

    torch.manual_seed(weight_seed)
    model = module.Model(*module.get_init_inputs()).to(device)
    torch.manual_seed(input_seed)
    inputs = [i.to(device) if isinstance(i, torch.Tensor) else i for i in module.get_inputs()]
    with torch.no_grad():
        out = model(*inputs)
    return model, inputs, out


def _same(a: Any, b: Any, rtol: float, atol: float) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True))


def check(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    device, seed = spec["device"], spec["seed"]
    module = _load(spec["path"])
    model, inputs, out = _run(module, device, seed, seed + 1)
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise Rejected(f"the output is a {type(out).__name__}, not a floating-point tensor")
    if not bool(torch.isfinite(out).all()):
        raise Rejected("the output has NaN or Inf values")
    if not _same(out, _run(module, device, seed, seed + 1)[2], 1e-5, 1e-6):
        raise Rejected("not deterministic: the same seed gave another output")
    if _same(out, _run(module, device, seed, seed + 2)[2], 1e-4, 1e-5):
        raise Rejected("constant output: other inputs give the same output")
    for k, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and _same(out, x, 1e-4, 1e-5):
            raise Rejected(f"the output equals input {k}")
    ms = _eager_ms(model, inputs, device)
    result = {"eager_ms": ms, "output_shape": list(out.shape),
              "input_shapes": [list(i.shape) for i in inputs if isinstance(i, torch.Tensor)]}
    if not spec["min_ms"] <= ms <= spec["max_ms"]:
        raise Rejected(f"eager time {ms:.3g} ms is outside {spec['min_ms']:g}-{spec['max_ms']:g} ms", result)
    return {"ok": True, "reason": "", **result}


def _eager_ms(model: Any, inputs: list[Any], device: str) -> float:
    import torch

    def call() -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    for _ in range(2):
        call()
    times, started = [], time.perf_counter()
    while len(times) < TIMED_CALLS and (len(times) < 3 or time.perf_counter() - started < TIME_BUDGET_S):
        times.append(call())
    return statistics.median(times)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    try:
        result = check(spec)
    except Rejected as exc:
        result = {"ok": False, "reason": str(exc.args[0]), **(exc.args[1] if len(exc.args) > 1 else {})}
    except Exception as exc:  # the problem itself failed: that is the verdict on it
        result = {"ok": False, "reason": f"fails to run: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                  if str(exc) else f"fails to run: {type(exc).__name__}"}
    tmp = Path(sys.argv[2] + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, sys.argv[2])


if __name__ == "__main__":
    main()
