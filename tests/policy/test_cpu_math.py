"""The cpu target's branch-free float math (cpu_math.CPU_MATH), and the op table's formulas
built on it, against float64 references over dense grids of float32 inputs: every function
within a few ulp (erf: the approximation's own absolute bound), NaN, infinities and the
edges of each domain as PyTorch has them. Plain C++, no torch build: a few seconds."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kcoder.policy.cpu_math import CPU_MATH
from kcoder.policy.emit_cpu import CFLAGS
from kcoder.policy.ops import render

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SPECIAL = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-45, 1e-38, 3e38,
           88.7, 88.72, 88.7228, 88.73, -87.3, -87.4, -103.0, 20.0, 20.001, 19.999, 0.3, -0.3, 0.5, -0.5]

# Results near FLT_MIN carry subnormal precision (mish(-103) = -103 e^-103, e^-103 has 8 bits).
TINY = 1e-37
# name: (C++ expression of x, float64 reference, inputs, allowed error in float32 ulps of the
# reference, absolute error allowed besides)
CASES = {
    "expf": ("expf(x)", torch.exp, (-110.0, 90.0), 3, 0.0),
    "logf": ("logf(x)", torch.log, (0.0, 1e4), 3, 0.0),
    "log1pf": ("log1pf(x)", torch.log1p, (-1.0, 50.0), 3, 0.0),
    "expm1f": ("expm1f(x)", torch.expm1, (-20.0, 20.0), 3, 0.0),
    "tanhf": ("tanhf(x)", torch.tanh, (-12.0, 12.0), 5, 0.0),
    "erff": ("erff(x)", torch.erf, (-6.0, 6.0), 0, 3e-7),
    "mish": (render("mish", ["x"], {}, "float"), F.mish, (-60.0, 60.0), 5, 0.0),
    "softplus": (render("softplus", ["x", 1.0, 20.0], {}, "float"), F.softplus, (-60.0, 60.0), 4, 0.0),
}


def _inputs(lo: float, hi: float) -> np.ndarray:
    dense = np.linspace(lo, hi, 200_001, dtype=np.float64)
    near0 = np.concatenate([np.geomspace(1e-30, 1.0, 20_000), -np.geomspace(1e-30, 1.0, 20_000)])
    x = np.concatenate([dense, near0[(near0 >= lo) & (near0 <= hi)], SPECIAL]).astype(np.float32)
    return x


def _run(expr: str, x: np.ndarray, tmp_path: Path) -> np.ndarray:
    src = (f"#include <cmath>\n#include <cstdio>\n#include <cstdint>\n#include <cstring>\n#include <vector>\n"
           f"{CPU_MATH}\nint main() {{\n  std::vector<float> in({len(x)}), out({len(x)});\n"
           f"  if (std::fread(in.data(), 4, in.size(), stdin) != in.size()) return 1;\n"
           f"  #pragma omp simd\n  for (size_t i = 0; i < in.size(); ++i) {{\n"
           f"    const float x = in[i];\n    out[i] = {expr};\n  }}\n"
           f"  std::fwrite(out.data(), 4, out.size(), stdout);\n}}\n")
    (tmp_path / "m.cpp").write_text(src)
    exe = tmp_path / "m"
    # the generated kernels' flags, so the vectorized code is what is checked (-fopenmp-simd for
    # -fopenmp: the same pragma, no runtime to link)
    flags = [f.replace("-fopenmp", "-fopenmp-simd") for f in CFLAGS]
    subprocess.run(["g++", *flags, "-o", str(exe), str(tmp_path / "m.cpp")], check=True)
    out = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout
    return np.frombuffer(out, dtype=np.float32)


@pytest.mark.parametrize("name", list(CASES))
def test_function_matches_float64_reference(name, tmp_path):
    expr, ref, (lo, hi), ulps, atol = CASES[name]
    x = _inputs(lo, hi)
    got = _run(expr, x, tmp_path).astype(np.float64)
    want = ref(torch.from_numpy(x).double()).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{name}: NaN at {x[np.isnan(got) != np.isnan(want)][:5]}"
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)  # what a correctly rounded float32 function returns
    inf = np.isinf(want32)
    assert np.array_equal(got[inf], want32[inf]), f"{name}: infinities differ at {x[inf][got[inf] != want32[inf]][:5]}"
    finite = np.isfinite(want32)
    # float32 ulps of the reference; a subnormal's ulp is the smallest subnormal
    ulp = np.spacing(np.abs(want32[finite])).astype(np.float64)
    err = np.abs(got[finite] - want[finite])
    bad = err > ulps * ulp + atol + TINY
    worst = np.argmax(err / (ulp + atol + TINY))
    assert not bad.any(), (f"{name}: {bad.sum()} inputs off, worst x={x[finite][worst]!r}: "
                           f"{got[finite][worst]!r} vs {want[finite][worst]!r} ({err[worst] / ulp[worst]:.1f} ulp)")


# Op-table formulas that stay scalar libm calls (or branches) in the cpu target's loops. Every
# other formula must vectorize: one scalar call keeps a whole fused loop scalar (issue 29's
# mish + bias + clamp ran at 0.43x eager that way).
SCALAR = {"exp2", "log2", "log10", "sin", "cos", "tan", "atan", "asin", "acos", "sinh", "cosh", "erfc",
          "fmax", "fmin", "pow", "atan2", "fmod", "logical_and", "logical_or", "bitwise_and", "bitwise_or"}
_ARGS = {"threshold": ["x", 0.5, 2.0], "clamp_min": ["x", 0.1], "clamp_max": ["x", 0.1], "where": ["z", "x", "y"],
         "pow": ["x", 1.7], "clamp": ["x", -1.0, 1.0]}
_BINARY = {"add", "sub", "mul", "div", "rsub", "maximum", "minimum", "fmax", "fmin", "atan2", "fmod", "eq", "ne",
           "gt", "ge", "lt", "le", "logical_and", "logical_or", "bitwise_and", "bitwise_or"}


def _is_gcc() -> bool:
    out = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout
    return "Free Software Foundation" in out


@pytest.mark.skipif(shutil.which("g++") is None or not _is_gcc(), reason="reads GCC's -fopt-info report")
def test_op_table_formulas_vectorize(tmp_path):
    from kcoder.policy.ops import POINTWISE

    src = ["#include <cmath>", "#include <cstdint>", "#include <cstring>", CPU_MATH]
    at: dict[int, str] = {}
    for op in POINTWISE:
        expr = render(op, _ARGS.get(op, ["x", "y"] if op in _BINARY else ["x"]), {}, "float")
        at[len("\n".join(src).split("\n")) + 1] = op  # the line the function will start on
        src += [f"void f_{op}(const float* __restrict__ a, const float* __restrict__ c, const float* __restrict__ d, "
                "float* __restrict__ b, long n) {",
                "  #pragma omp simd", "  for (long i = 0; i < n; ++i) {",
                f"    const float x = a[i], y = c[i]; const bool z = d[i] > 0.0f; b[i] = {expr};", "  }", "}"]
    (tmp_path / "ops.cpp").write_text("\n".join(src) + "\n")
    flags = [f.replace("-fopenmp", "-fopenmp-simd") for f in CFLAGS]
    res = subprocess.run(["g++", *flags, "-fopt-info-vec-all", "-c", str(tmp_path / "ops.cpp"),
                          "-o", str(tmp_path / "ops.o")], capture_output=True, text=True, check=True)
    done = {at[int(line.split(":")[1])] for line in res.stderr.splitlines()
            if re.search(r"ops\.cpp:\d+:\d+: note: vectorized [1-9]\d* loops? in function", line)}
    assert set(POINTWISE) - SCALAR - done == set(), "these formulas no longer vectorize"
    assert done & SCALAR == set(), "these vectorize now: take them off SCALAR"
