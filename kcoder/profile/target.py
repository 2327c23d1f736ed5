"""The process `kcoder profile` runs (alone, or under ncu): build, then run the candidate.

    python -m kcoder.profile.target MODE JOB.json OUT.json

MODE is one of
- prepare: build the candidate's extensions (recording their build directories, even when
  the compile fails), and on a GPU run one forward and count the minimum bytes it must move;
- run: the process ncu profiles: warm-up forwards outside, then exactly one forward inside
  the NVTX range "kcoder_candidate", so `--nvtx-include "kcoder_candidate/"` sees only the
  candidate's kernels (no reference, no harness, no warm-up);
- timeline: the fallback without ncu: torch.profiler's per-kernel device times over a few
  forwards.

The result goes to OUT.json (the candidate may print anything on stdout). Like the
evaluator's worker, it builds with kcoder's content-keyed build directories, so a candidate
the evaluator already built is not rebuilt here.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from kcoder.build import inline as build
from kcoder.evaluate.harness.loading import first_line as _first_line
from kcoder.evaluate.harness.loading import load_module as _load_module
from kcoder.evaluate.harness.loading import set_precision

NVTX_RANGE = "kcoder_candidate"


class TargetError(Exception):
    """A failure with a one-line reason; `stage` says where (problem, build, run)."""

    def __init__(self, stage: str, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.stage, self.reason, self.log = stage, reason, log


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


class Target:
    """Loads the problem and candidate the way the evaluator does, on the GPU when present."""

    def __init__(self, job: dict[str, Any], result: dict[str, Any]) -> None:
        self.job, self.result = job, result
        self.notes: list[str] = result.setdefault("notes", [])

    def setup(self) -> None:
        self.notes.extend(build.prepare_environment("cuda"))
        import torch

        self.torch = torch
        self.gpu = bool(torch.cuda.is_available())
        self.result.update(gpu=self.gpu, torch_version=torch.__version__, torch_cuda=torch.version.cuda)
        if self.gpu:
            build.set_arch_for_device()
            major, minor = torch.cuda.get_device_capability()
            self.result.update(device_name=torch.cuda.get_device_name(0), arch=f"sm_{major}{minor}")
        elif "TORCH_CUDA_ARCH_LIST" not in os.environ:
            # without a GPU torch would compile for every arch it knows (slow); pick one
            os.environ["TORCH_CUDA_ARCH_LIST"] = self.job.get("arch_list") or "9.0"
            self.notes.append(f"no GPU: compiling for TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']}")
        set_precision(torch, self.job.get("precision", "strict"))
        build.install_build_wrapper()

    def load(self) -> None:
        problem_path, candidate_path = Path(self.job["problem"]), Path(self.job["candidate"])
        try:
            self.problem = _load_module(problem_path, "kcoder_reference_problem")
            self.init_inputs = list(self.problem.get_init_inputs())
        except Exception as exc:
            raise TargetError("problem", f"{problem_path}: the problem file failed: {_first_line(exc)}",
                              traceback.format_exc()[-3000:]) from None
        try:
            candidate = _load_module(candidate_path, "kcoder_candidate")
        except build.BuildError as exc:
            raise TargetError("build", str(exc), exc.log) from None
        except Exception as exc:
            raise TargetError("build", f"the candidate raised while loading: {_first_line(exc)}",
                              traceback.format_exc()[-3000:]) from None
        finally:
            # kcoder's build wrapper records every call, a failed or an already-built one too,
            # so the ptxas report finds build.ninja and the CUDA source of each.
            self.result["builds"] = build.BUILD_RECORDS
        self.model_cls = getattr(candidate, "ModelNew", None)
        if self.model_cls is None:
            raise TargetError("build", "the candidate defines no ModelNew")

    def instantiate(self) -> None:
        from kcoder.evaluate.harness.verify import make_inputs

        torch = self.torch
        try:
            torch.manual_seed(int(self.job.get("seed", 0)))
            self.model = self.model_cls(*self.init_inputs).to("cuda")
            self.inputs = make_inputs(self.problem, int(self.job.get("seed", 0)), "cuda")
        except Exception as exc:
            raise TargetError("run", f"ModelNew or its inputs failed on cuda: {_first_line(exc)}",
                              traceback.format_exc()[-3000:]) from None

    def forward(self) -> Any:
        try:
            with self.torch.no_grad():
                out = self.model(*self.inputs)
            self.torch.cuda.synchronize()
            return out
        except Exception as exc:
            raise TargetError("run", f"forward failed: {_first_line(exc)}", traceback.format_exc()[-3000:]) from None

    def warm_up(self) -> Any:
        out = None
        for _ in range(max(1, int(self.job.get("warmup", 2)))):
            out = self.forward()
        return out


def run_prepare(t: Target) -> None:
    """Build; on a GPU also run once, count minimum bytes and measure the device's ceilings."""
    t.setup()
    t.load()
    if not t.gpu:
        return
    t.instantiate()
    out = t.warm_up()
    moved = _tensors(t.inputs) + _tensors(out) + list(t.model.parameters()) + list(t.model.buffers())
    t.result["min_bytes"] = int(sum(x.numel() * x.element_size() for x in moved))
    # The device's ceilings are not measured here: this process loaded the candidate, and the
    # judge's speed of light reads them (profile/calibrate.py measures them for the profiler).


def _ready_on_gpu(t: Target) -> None:
    """Build, load and instantiate the candidate on the GPU, and warm it up."""
    t.setup()
    t.load()
    if not t.gpu:
        raise TargetError("run", "torch sees no CUDA GPU")
    t.instantiate()
    t.warm_up()


def run_under_ncu(t: Target) -> None:
    """Warm-up outside the range, then one forward inside NVTX range kcoder_candidate."""
    _ready_on_gpu(t)
    nvtx = t.torch.cuda.nvtx
    nvtx.range_push(NVTX_RANGE)
    try:
        t.forward()
    finally:
        nvtx.range_pop()
    t.result["ok"] = True


def run_timeline(t: Target) -> None:
    """Per-kernel device time over a few forwards, from torch.profiler (CUPTI activity).

    The L2 is flushed before each forward, as the evaluator's timing and ncu's replays do, so
    these times are comparable with both. The flush's own kernels are profiled alone first and
    subtracted by name (a candidate may launch a kernel of the same name itself).
    """
    _ready_on_gpu(t)
    torch = t.torch
    from kcoder.evaluate.harness.timing import flush_l2, l2_flush_buffer

    flush = l2_flush_buffer(torch)
    repeat = max(1, int(t.job.get("repeat", 5)))
    flushes = _kernel_times(torch, repeat, lambda: flush_l2(flush))

    def flushed_forward() -> None:
        flush_l2(flush)
        t.forward()

    kernels = _kernel_times(torch, repeat, flushed_forward)
    for name, own in flushes.items():
        if name in kernels:
            kernels[name] = {k: kernels[name][k] - own[k] for k in own}
    kernels = {name: v for name, v in kernels.items() if v["calls"] > 0}
    t.result["timeline"] = [{"name": name, "calls_per_forward": v["calls"] / repeat,
                             "us_per_forward": max(0.0, v["total_us"] / repeat),
                             "us_per_call": max(0.0, v["total_us"] / v["calls"])}
                            for name, v in sorted(kernels.items(), key=lambda kv: -kv[1]["total_us"])]
    t.result["forwards"] = repeat
    t.result["ok"] = True


def _kernel_times(torch: Any, repeat: int, step: Any) -> dict[str, dict[str, float]]:
    """{kernel name: {calls, total_us}} of the device work `step` launches, run `repeat` times."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            step()
        torch.cuda.synchronize()
    kernels: dict[str, dict[str, float]] = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        entry = kernels.setdefault(event.name, {"calls": 0, "total_us": 0.0})
        entry["calls"] += 1
        entry["total_us"] += float(event.time_range.elapsed_us())
    return kernels


MODES = {"prepare": run_prepare, "run": run_under_ncu, "timeline": run_timeline}


def main() -> None:
    mode, job_path, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    job = json.loads(Path(job_path).read_text())
    result: dict[str, Any] = {"mode": mode}
    try:
        MODES[mode](Target(job, result))
    except TargetError as exc:
        result.update(error=exc.reason, stage=exc.stage, log=exc.log)
    except Exception as exc:  # anything else is still a reason, never a bare traceback
        result.update(error=_first_line(exc), stage="run", log=traceback.format_exc()[-3000:])
    tmp = Path(out_path + ".tmp")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip teardown: a broken extension must not crash after the result is written


if __name__ == "__main__":
    main()
