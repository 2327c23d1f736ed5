"""Run a candidate's forward inside an NVTX range, for capturing Nsight Compute fixtures.

    ncu --clock-control none --nvtx --nvtx-include "kcoder_candidate/" -o OUT \
        python tests/gpu/ncu_capture.py PROBLEM CANDIDATE
"""

from __future__ import annotations

import importlib.util
import sys

import torch


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    problem, candidate = load(sys.argv[1], "problem"), load(sys.argv[2], "candidate")
    torch.manual_seed(0)
    init = problem.get_init_inputs()
    model = candidate.ModelNew(*init).cuda()
    with torch.device("cuda"):
        inputs = problem.get_inputs()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        model(*inputs)  # warm-up outside the range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("kcoder_candidate")
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
