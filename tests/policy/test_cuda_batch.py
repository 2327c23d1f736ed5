"""Issue 48 on the cuda target: a CUDA candidate's literals that follow the batch become
expressions of the run-time batch (cuda_batch.py), and the candidate is then made for any batch
size; anything else leaves it made for the problem's shapes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kcoder.policy.cuda_batch import generalize
from kcoder.policy.driver import generate
from kcoder.settings import Settings

ROOT = Path(__file__).parents[2]
NVCC = shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"] if Path(p).exists()), None)
SIZES = [2048, 3, 5]


def _texts(template: str) -> list[str]:
    """The template rendered at each traced batch: {n} the batch times 64, {m} 64 times it less one."""
    return [template.format(n=64 * b, m=64 * b - 1, b=b) for b in SIZES]


def _unit(body: str) -> str:
    return 'CPP_SOURCE = r"""\n' + body + '"""\n'


def test_literals_that_follow_the_batch_become_expressions_of_it():
    body = ("  static const std::vector<int64_t> sizes = {{{b}LL, 64LL}};\n"
            "__global__ void k(const KPtrs a) {{\n  constexpr int kL = 64;\n  constexpr int kN = {n};\n"
            "  if (i >= kN) return;\n}}\n  k<<<{m}u, 256>>>(a);\n")
    out = generalize(_texts(_unit(body)), SIZES)
    assert out is not None
    assert "  const std::vector<int64_t> sizes = {(kc_batch * 1LL), 64LL};" in out  # no longer static
    assert "  constexpr int kL = 64;" in out  # what does not follow the batch stays a constant
    assert "  const int kN = ((long long)(kc_batch * 64LL));" in out
    assert "  k<<<((unsigned)(kc_batch * 64LL - 1LL)), 256>>>(a);" in out


@pytest.mark.parametrize("body, why", [
    ("  constexpr int kL = {n};\n  constexpr int kP = (kL + 127) / 128;\n}}\n", "a constexpr reads it"),
    ("  __shared__ float s[{n}];\n}}\n", "a shared array's size"),
    ("  const int x = {q};\n}}\n", "not affine in the batch"),
    ("  const float x = {f};\n}}\n", "a float"),
    ("  const {t} x = 3;\n}}\n", "an index width"),
])
def test_what_cannot_follow_the_batch_leaves_the_candidate_static(body, why):
    texts = [_unit(body.format(n=64 * b, q=b * b, f=1.0 / b, t="int" if b < 100 else "long long")) for b in SIZES]
    assert generalize(texts, SIZES) is None, why


def test_a_literal_outside_the_kernel_sources_leaves_the_candidate_static():
    texts = _texts('MADE_FOR = [(0, ({n}, 64))]\n' + _unit("  const int x = {n};\n"))
    assert generalize(texts, SIZES) is None
    assert generalize(_texts(_unit("  const int x = 7;\n")), SIZES) == _unit("  const int x = 7;\n")


GENERIC = {
    # pointwise over [B, 4096]: the element count and the grid follow the batch
    "elementwise_chain": ["  const int kN = ((long long)(kc_batch * 4096LL));", "8388608"],
    # a mean over every element: one row split over blocks, its length, chunking and 1/N follow it
    "mse_loss": ["#define k0_S1 (((kc_batch * 4096LL) + THREADS * 4 * 4 - 1) / (THREADS * 4 * 4))",
                 "16777216", "(1.0 / (double)(kc_batch * 4096))"],
}


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("example", sorted(GENERIC))
def test_a_generic_cuda_candidate_reads_the_batch_and_its_kernels_compile(example, tmp_path):
    """The examples' CUDA candidates: forward sets the batch, the binding checks sizes and the
    32-bit reach against it, and the CUDA unit (kernels and launchers) compiles for sm_90."""
    generated = generate(ROOT / f"examples/{example}/model.py", Settings(device="cuda"), tmp_path / "work")
    source = generated.source
    assert source is not None and "Made for any batch size" in source, generated.error
    assert "MADE_FOR = [(0, (None, 4096))" in source and "  kc_batch_set(B);\n" in source
    assert "const std::vector<int64_t> sizes = {(kc_batch * 1LL), 4096LL};" in source
    assert "TORCH_CHECK((kc_batch * 4096LL) < 2130706432LL" in source
    line, own_count, *more = GENERIC[example]
    assert line in source and own_count not in source  # the problem's own element count is nowhere baked in
    assert all(m in source for m in more)
    cuda = re.search(r'CUDA_SOURCE = r"""\n(.*?)"""', source, re.S).group(1)
    (tmp_path / "unit.cu").write_text(cuda)
    proc = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "-DTHREADS=256", "-DUNROLL=2", "-c",
                           str(tmp_path / "unit.cu"), "-o", str(tmp_path / "unit.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
