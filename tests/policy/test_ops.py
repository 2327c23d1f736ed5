"""Each pointwise formula of the op table, compiled as plain C++ (no torch: a second or two)
and compared with PyTorch on values that cover both branches, zero, large magnitudes, NaN."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kcoder.policy.emit_cpu import CPU_MATH
from kcoder.policy.ops import render

X = [-30.0, -4.0, -2.5, -1.0, -0.3, 0.0, 0.2, 0.7, 1.0, 3.1, 6.5, 25.0, float("nan")]
Y = [0.5, -1.5, 2.0, 0.0, -0.25, 1.0, -3.0, 4.0, 0.7, -0.1, 2.5, 1.0, 0.0]

# op name, kwargs or extra args, the PyTorch reference.
CASES = [
    ("relu", [], {}, torch.relu), ("gelu", [], {}, F.gelu),
    ("gelu", [], {"approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh")),
    ("silu", [], {}, F.silu), ("sigmoid", [], {}, torch.sigmoid), ("tanh", [], {}, torch.tanh),
    ("hardtanh", [-0.5, 2.0], {}, lambda x: F.hardtanh(x, -0.5, 2.0)),
    ("leaky_relu", [0.2], {}, lambda x: F.leaky_relu(x, 0.2)),
    ("elu", [1.3], {}, lambda x: F.elu(x, 1.3)),
    ("softplus", [2.0, 5.0], {}, lambda x: F.softplus(x, 2.0, 5.0)),
    ("hardswish", [], {}, F.hardswish), ("hardsigmoid", [], {}, F.hardsigmoid), ("mish", [], {}, F.mish),
    ("clamp", [-1.0, 0.5], {}, lambda x: torch.clamp(x, -1.0, 0.5)),
    ("exp", [], {}, torch.exp), ("log1p", [], {}, torch.log1p), ("abs", [], {}, torch.abs),
    ("neg", [], {}, torch.neg), ("pow", [3], {}, lambda x: x ** 3), ("erf", [], {}, torch.erf),
    ("rsqrt", [], {}, torch.rsqrt), ("sign", [], {}, torch.sign), ("square", [], {}, torch.square),
]
BINARY = [
    ("maximum", torch.maximum), ("minimum", torch.minimum), ("add", torch.add), ("sub", torch.sub),
    ("mul", torch.mul), ("div", torch.div), ("atan2", torch.atan2),
]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _run_cpp(exprs: list[str], tmp_path: Path, prelude: str = "") -> list[list[float]]:
    xs = ", ".join("NAN" if v != v else f"{v}f" for v in X)
    ys = ", ".join(f"{v}f" for v in Y)
    body = "\n".join(f'    std::printf("%.9g ", (double)({e}));' if i == 0 else
                     f'    std::printf("%.9g ", (double)({e}));' for i, e in enumerate(exprs))
    src = (f"#include <cmath>\n#include <cstdio>\n#include <cstdint>\n#include <cstring>\n{prelude}\nint main() {{\n"
           f"  const float xs[] = {{{xs}}};\n  const float ys[] = {{{ys}}};\n"
           f"  for (int i = 0; i < {len(X)}; ++i) {{\n    const float x = xs[i], y = ys[i];\n"
           f"{body}\n    std::printf(\"\\n\");\n  }}\n}}\n")
    (tmp_path / "ops.cpp").write_text(src)
    subprocess.run(["g++", "-O2", "-o", str(tmp_path / "ops"), str(tmp_path / "ops.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "ops")], capture_output=True, text=True, check=True).stdout
    rows = [list(map(float, line.split())) for line in out.strip().splitlines()]
    return [list(col) for col in zip(*rows, strict=True)]


@pytest.mark.parametrize("math", ["libm", "cpu-vector"])
def test_each_formula_matches_pytorch(tmp_path, math):
    """With libm (the CUDA text uses the same names) and with the cpu target's branch-free
    expf/erff/tanhf, which replace libm's in the generated C++."""
    exprs = [render(op, ["x", *extra], kw, "float") for op, extra, kw, _ in CASES]
    exprs += [render(op, ["x", "y"], {}, "float") for op, _ in BINARY]
    columns = _run_cpp(exprs, tmp_path, CPU_MATH if math == "cpu-vector" else "")
    x, y = torch.tensor(X), torch.tensor(Y)
    refs = [ref(x) for *_, ref in CASES] + [ref(x, y) for _, ref in BINARY]
    names = [c[0] for c in CASES] + [b[0] for b in BINARY]
    for name, got, want in zip(names, columns, refs, strict=True):
        got_t = torch.tensor(got, dtype=torch.float64)
        want_t = want.double()
        assert torch.equal(got_t.isnan(), want_t.isnan()), f"{name}: NaN positions differ: {got} vs {want.tolist()}"
        close = torch.isclose(got_t, want_t, rtol=2e-5, atol=1e-6, equal_nan=True)
        assert bool(close.all()), f"{name}: {got} vs {want.tolist()}"


def test_scalars_render_as_float_literals():
    assert render("add", ["v_x", 2], {}, "float") == "(v_x + 2.0f)"
    assert render("mul", ["v_x", float("inf")], {}, "float") == "(v_x * INFINITY)"
    assert render("gt", ["v_x", 0.5], {}, "bool") == "((bool)(v_x > 0.5f))"
