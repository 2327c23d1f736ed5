"""Peak device memory of an evaluation over its one-input-set footprint (inputs + the
reference's output + the candidate's output), for the examples and a synthetic problem
with 6 GB tensors (cuda; the goal is a ratio of at most 3 and a verdict with timing).

    python bench/memory.py [--big-gb 6] [--skip-examples]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.evaluate import EvalOptions, evaluate  # noqa: E402

BIG_PROBLEM = '''import torch
import torch.nn as nn

ROWS, COLS = 4096, {cols}


class Model(nn.Module):
    """out = x * 2 + 1 on one {gb:.1f} GB fp32 tensor."""

    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''

BIG_SOLUTION = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = """
__global__ void axpb(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) y[i] = x[i] * 2.0f + 1.0f;
}
cudaError_t launch_axpb(const float* x, float* y, long long n, cudaStream_t s) {
    axpb<<<132 * 16, 512, 0, s>>>(x, y, n);
    return cudaGetLastError();
}
"""
CPP = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
cudaError_t launch_axpb(const float* x, float* y, long long n, cudaStream_t s);
torch::Tensor axpb(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous fp32 cuda");
    auto y = torch::empty_like(x);
    C10_CUDA_CHECK(launch_axpb(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               c10::cuda::getCurrentCUDAStream()));
    return y;
}
"""
_ext = load_inline(name="kcoder_bench_axpb", cpp_sources=[CPP], cuda_sources=[CUDA], functions=["axpb"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.axpb(x)
'''


def row(name: str, options: EvalOptions, problem: Path, solution: Path) -> str:
    started = time.perf_counter()
    v = evaluate(problem, solution, options)
    wall = time.perf_counter() - started
    if v.footprint_mb and v.peak_memory_mb:
        ratio = f"{v.peak_memory_mb / v.footprint_mb:6.2f}"
    else:
        ratio = "     -"
    timed = f"{v.speedup_vs_eager:.2f}x eager" if v.speedup_vs_eager else v.reason[:70]
    return (f"{name:22} {v.footprint_mb or 0:10.0f} {v.reference_peak_mb or 0:10.0f} {v.peak_memory_mb or 0:10.0f} "
            f"{ratio} {wall:7.1f}  {v.status}: {timed}")


def _examples(args: argparse.Namespace, options: EvalOptions, lines: list[str]) -> None:
    for folder in sorted(p.parent for p in (ROOT / "examples").glob("*/solution_cuda.py")):
        lines.append(row(folder.name, options, folder / "model.py", folder / "solution_cuda.py"))
        print(lines[-1], flush=True)


def _big(args: argparse.Namespace, options: EvalOptions, lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cols = int(args.big_gb * 2**30 / 4 / 4096)
        gib = 4096 * cols * 4 / 2**30
        problem, solution = Path(tmp) / "big_axpb.py", Path(tmp) / "big_axpb_new.py"
        problem.write_text(BIG_PROBLEM.format(cols=cols, gb=gib))
        solution.write_text(BIG_SOLUTION)
        lines.append(row(f"axpb {gib:.1f} GiB", options, problem, solution))
        print(lines[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-gb", type=float, default=6.4, help="size of the synthetic problem's tensor")
    parser.add_argument("--skip-examples", action="store_true")
    parser.add_argument("--big-first", action="store_true", help="evaluate the big problem before the examples")
    args = parser.parse_args()
    # no torch.compile baseline: memory is the point, and inductor's compile costs a minute here
    options = EvalOptions(device="cuda", timing_budget_s=1.0, compile_baseline=False)
    lines = [f"{'problem':22} {'footprint':>10} {'ref peak':>10} {'eval peak':>10}  ratio  wall s  verdict",
             f"{'':22} {'MiB':>10} {'MiB':>10} {'MiB':>10}"]
    big = [] if not args.big_gb else [_big]
    examples = [] if args.skip_examples else [_examples]
    for part in (big + examples) if args.big_first else (examples + big):
        part(args, options, lines)
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
