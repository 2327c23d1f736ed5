"""Host time of a policy candidate's forward: its steps in Python against the same steps as one
C++ function (kcoder/policy/native_forward.py), side by side in one run.

    python bench/forward_overhead.py            # the cpu target, tiny shapes (the kernels cost ~nothing)
    python bench/forward_overhead.py --calls 5000 --repeats 7

Each problem below is rendered twice by the policy (render_program native=False / True), both
built with load_inline, and called in alternation on one row of data, so what is timed is the
forward's own cost around its kernels: Python steps, allocation, the crossings into C++. On a GPU
this is what makes a small problem host-bound (the kernels queue faster than forward issues
them); the GPU figure is tests/gpu/device_session.sh gap's. Prints us per call (median of the
repeats) and the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kcoder.policy.capture import capture_graph  # noqa: E402
from kcoder.policy.graph import load_graph  # noqa: E402
from kcoder.policy.plan import plan_graph  # noqa: E402
from kcoder.policy.program import render_program  # noqa: E402
from kcoder.policy.rewrite import rewrite  # noqa: E402

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn({n}))
        self.bias = nn.Parameter(torch.randn({n}))

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn(1, {n})]


def get_init_inputs():
    return []
'''
# One kernel; one reduction and its epilogue; three kernels with intermediates.
BODIES = {
    "scale_shift_relu": "torch.relu(x * self.weight + self.bias)",
    "softmax_row": "torch.softmax(x * self.weight, dim=-1)",
    "three_kernels": "torch.softmax(x, dim=-1) * x.sum(dim=-1, keepdim=True) + torch.cumsum(x + self.bias, dim=-1)",
}


def render(name: str, body: str, work: Path, n: int) -> dict[bool, Path]:
    problem = work / f"{name}.py"
    problem.write_text(PROBLEM.format(n=n, body=body))
    graph = load_graph(capture_graph(problem, work / f"capture_{name}"))
    rewrite(graph, [])
    plan = plan_graph(graph, [])
    files = {}
    for native in (False, True):
        path = work / f"cand_{name}_{'native' if native else 'python'}.py"
        path.write_text(render_program(plan, graph, "cpu", problem.name, native=native))
        files[native] = path
    return files


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call_us(model, x: torch.Tensor, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        model(x)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n", type=int, default=256, help="row length (one row)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        work = Path(tmp)
        os.environ["TORCH_EXTENSIONS_DIR"] = str(work / "extensions")  # its own builds: no other run's
        for name, body in BODIES.items():
            files = render(name, body, work, args.n)
            reference = load(work / f"{name}.py").Model()
            models = {native: load(path).ModelNew() for native, path in files.items()}
            for model in models.values():
                model.load_state_dict(reference.state_dict())
            x = torch.randn(1, args.n)
            for model in models.values():  # the same computation as the problem's
                torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-4)
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):  # alternated, so drift hits both alike
                for native, model in models.items():
                    per_call_us(model, x, args.calls // 10)  # warm
                    times[native].append(per_call_us(model, x, args.calls))
            py, cc = statistics.median(times[False]), statistics.median(times[True])
            rows.append((name, py, cc))
    print(f"{'problem':<18} {'python us':>10} {'c++ us':>8} {'ratio':>6}   (cpu, 1 x {args.n}, 1 thread)")
    for name, py, cc in rows:
        print(f"{name:<18} {py:>10.2f} {cc:>8.2f} {py / cc:>6.2f}")


if __name__ == "__main__":
    main()
