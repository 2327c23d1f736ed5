"""Worker process: evaluates one candidate, in a fresh interpreter and process group.

Run as `python -m kcoder.evaluate.worker JOB.json FD`. It reports progress on file
descriptor FD as JSON lines: {"phase": ...} when a stage starts (the parent enforces each
stage's time limit) and {"verdict": {...}} at the end. Everything the candidate prints goes
to stdout/stderr, which the parent keeps apart from this channel.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kcoder.build import inline as build
from kcoder.evaluate.options import EvalOptions
from kcoder.verdict import Verdict, reward_for


class Channel:
    def __init__(self, fd: int) -> None:
        self.stream = os.fdopen(fd, "w", buffering=1)

    def send(self, **message: Any) -> None:
        self.stream.write(json.dumps(message, default=str) + "\n")
        self.stream.flush()


class Stop(Exception):
    """Ends the evaluation with the verdict as it stands."""


def load_module(path: Path, name: str) -> Any:
    """Execute a Python file as module `name` (frames keep the real file name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _candidate_traceback(exc: BaseException, candidate: str) -> tuple[str, str]:
    """(short location, trimmed traceback) focusing on the candidate's own frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == candidate]
    where = f" at {Path(candidate).name}:{mine[-1].lineno}" if mine else ""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-12:])
    return where, text[-4000:]


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for one-line verdict reasons."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


class Evaluation:
    """One candidate's evaluation, stage by stage, filling in a Verdict."""

    def __init__(self, job: dict[str, Any], channel: Channel) -> None:
        self.options = EvalOptions.from_dict(job["options"])
        self.problem_path = Path(job["problem"])
        self.candidate_path = Path(job["candidate"])
        self.channel = channel
        self.verdict = Verdict(problem=str(self.problem_path), candidate=str(self.candidate_path),
                               device=self.options.device, precision=self.options.precision,
                               allow=list(self.options.allow))

    def phase(self, name: str) -> None:
        self.verdict.stage = name
        self.channel.send(phase=name, verdict=self.verdict.to_dict())
        self._t0 = time.perf_counter()

    def done(self, name: str) -> None:
        self.verdict.seconds[name] = round(time.perf_counter() - self._t0, 3)

    def fail(self, stage: str, reason: str, log: str = "") -> None:
        self.verdict.fail(stage, reason, log)
        raise Stop

    def run(self) -> Verdict:
        try:
            self._run()
        except Stop:
            pass
        return self.verdict

    def _run(self) -> None:
        notes = build.prepare_environment(self.options.device)
        self.verdict.notes.extend(notes)
        import torch

        self.torch = torch
        self.verdict.torch_version = torch.__version__
        if self.options.device == "cuda":
            if not torch.cuda.is_available():
                self.fail("problem", "--device cuda asked for, but torch sees no CUDA GPU here")
            build.set_arch_for_device()
            self.verdict.device_name = torch.cuda.get_device_name(0)
        else:
            import platform

            self.verdict.device_name = platform.processor() or platform.machine() or "cpu"
        _set_precision(torch, self.options.precision)
        build.install_build_wrapper(fast=self.options.fast_build)
        self._load_problem()
        self._build()
        if self.options.stop_after == "build":
            self.verdict.reason = "compiled"
            return
        self._verify()
        if self.options.stop_after == "verify":
            self.verdict.reason = "correct (not timed)"
            self.verdict.reward = 1
            return
        self._time()

    def _load_problem(self) -> None:
        from kcoder.evaluate.verify import ProblemInputError, make_inputs

        self.phase("problem")
        torch = self.torch
        try:
            self.problem = load_module(self.problem_path, "kcoder_reference_problem")
            init = self.problem.get_init_inputs()
            if not isinstance(init, (list, tuple)):
                raise ProblemInputError(f"get_init_inputs() returned {type(init).__name__}, expected a list")
            self.init_inputs = list(init)
            torch.manual_seed(self.options.seed)
            self.ref_model = self.problem.Model(*self.init_inputs).to(self.options.device)
            make_inputs(self.problem, self.options.seed, self.options.device)
        except Exception as exc:  # the user's problem file failed: bad input, exit code 2
            where, text = _candidate_traceback(exc, str(self.problem_path))
            self.fail("problem", f"{self.problem_path}: the problem file failed{where}: {first_line(exc)}", text)
        self.done("problem")

    def _build(self) -> None:
        self.phase("build")
        torch = self.torch
        self.timer_identities = _timer_identities(torch)
        try:
            self.candidate = load_module(self.candidate_path, "kcoder_candidate")
            model_cls = getattr(self.candidate, "ModelNew", None)
            if model_cls is None:
                self.fail("build", "the candidate defines no ModelNew")
        except build.BuildError as exc:
            self.verdict.notes.extend(f"build {r['name']}: {r['seconds']} s" for r in build.BUILD_RECORDS)
            self.fail("build", str(exc), exc.log)
        except Stop:
            raise
        except Exception as exc:
            where, text = _candidate_traceback(exc, str(self.candidate_path))
            self.fail("build", f"the candidate raised while loading{where}: {first_line(exc)}", text)
        self.verdict.compiled = True
        for record in build.BUILD_RECORDS:
            self.verdict.notes.append(build.describe(record))
        try:
            torch.manual_seed(self.options.seed)
            self.new_model = model_cls(*self.init_inputs).to(self.options.device)
            _copy_weights(self.ref_model, self.new_model)
        except Exception as exc:
            where, text = _candidate_traceback(exc, str(self.candidate_path))
            self.fail("build", f"ModelNew(*get_init_inputs()) raised{where}: {first_line(exc)}", text)
        self.done("build")

    def integrity(self, when: str) -> None:
        """Dynamic checks after the candidate ran: timers and default stream untouched."""
        torch = self.torch
        if _timer_identities(torch) != self.timer_identities:
            self.fail(self.verdict.stage, f"integrity: timing or harness functions were replaced "
                      f"(seen after {when})")
        if self.options.device == "cuda" and torch.cuda.current_stream() != torch.cuda.default_stream():
            self.fail(self.verdict.stage, f"integrity: the candidate changed the current CUDA stream "
                      f"(seen after {when})")

    def sync(self) -> None:
        if self.options.device == "cuda":
            self.torch.cuda.synchronize()

    def _verify(self) -> None:
        from kcoder.evaluate.guard import Guard
        from kcoder.evaluate.verify import CandidateFailure, verify

        self.phase("verify")
        self.guard = Guard(str(self.candidate_path), list(self.options.allow))
        try:
            result = verify(self.problem, self.ref_model, self.new_model, device=self.options.device,
                            n_sets=self.options.n_input_sets, seed=self.options.seed,
                            precision=self.options.precision, guard=self.guard, sync=self.sync,
                            integrity=self.integrity)
        except CandidateFailure as exc:
            self.fail("verify", str(exc))
        except Stop:
            raise
        except Exception as exc:
            self._fail_from_exception("verify", exc)
        self.ref_mutates = result.reference_mutates_inputs
        self.verdict.n_input_sets = result.n_sets
        self._record_errors(result.stats)
        self.verdict.notes.extend(result.notes)
        self.verdict.correct = True
        self.done("verify")

    def _fail_from_exception(self, stage: str, exc: BaseException) -> None:
        where, text = _candidate_traceback(exc, str(self.candidate_path))
        message = first_line(exc)
        if self.guard.violations:
            self.fail(stage, f"fallback refused: {self.guard.violations[0].describe()}", text)
        lowered = message.lower()
        if "out of memory" in lowered:
            kind = "CUDA out of memory"
        elif "illegal memory access" in lowered or "illegal address" in lowered:
            kind = "illegal memory access in a CUDA kernel"
        elif "cuda error" in lowered or "acceleratorerror" in lowered:
            kind = "CUDA error"
        else:
            kind = "the candidate raised"
        self.fail(stage, f"{kind}{where}: {message}", text)

    def _record_errors(self, stats: Any) -> None:
        v = self.verdict
        v.max_abs_err = max(v.max_abs_err or 0.0, stats.max_abs_err)
        v.max_rel_err = max(v.max_rel_err or 0.0, stats.max_rel_err)
        v.rel_norm_err = max(v.rel_norm_err or 0.0, stats.rel_norm_err)
        v.tolerance = stats.tolerance or v.tolerance

    def _time(self) -> None:
        from kcoder.evaluate.timed import run_timing

        self.phase("timing")
        try:
            run_timing(self)
        except Stop:
            raise
        except Exception as exc:
            self._fail_from_exception("timing", exc)
        v = self.verdict
        v.reward = reward_for(v.correct, v.speedup_vs_eager, v.speedup_vs_compile)
        v.stage = "done"
        parts = [f"correct on {v.n_input_sets} input sets + {v.timing_rounds} timed calls"]
        if v.speedup_vs_eager is not None:
            parts.append(f"{v.speedup_vs_eager:.2f}x vs eager")
        if v.speedup_vs_compile is not None:
            parts.append(f"{v.speedup_vs_compile:.2f}x vs torch.compile")
        v.reason = ", ".join(parts)
        self.done("timing")


def _set_precision(torch: Any, precision: str) -> None:
    """Strict: fp32 is fp32 everywhere (baselines too). Relaxed: TF32 allowed for all."""
    relaxed = precision == "relaxed"
    torch.backends.cuda.matmul.allow_tf32 = relaxed
    torch.backends.cudnn.allow_tf32 = relaxed
    torch.set_float32_matmul_precision("high" if relaxed else "highest")


def _timer_identities(torch: Any) -> list[int]:
    fns = [time.perf_counter, time.perf_counter_ns, time.time, time.monotonic, torch.cuda.synchronize,
           torch.cuda.Event.record, torch.cuda.Event.elapsed_time, torch.cuda.Event.synchronize,
           torch.Tensor.__eq__, torch.equal, torch.allclose, torch.isnan, torch.Tensor.clone,
           torch.nn.Module.__call__, torch.utils.cpp_extension.load_inline]
    from kcoder.evaluate import compare, timing, verify

    fns += [compare.compare_outputs, compare._compare_tensor, verify.verify, verify.inputs_equal,
            timing.measure, timing.Clock.call]
    return [id(f) for f in fns]


def _copy_weights(ref: Any, new: Any) -> None:
    """Copy the reference's parameters and buffers into ModelNew where name and shape match."""
    ref_state = ref.state_dict()
    new_state = new.state_dict()
    shared = {k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape}
    new.load_state_dict(shared, strict=False)


def main() -> None:
    job_path, fd = sys.argv[1], int(sys.argv[2])
    faulthandler.enable()  # a segfault still prints the Python stack to stderr for the parent
    channel = Channel(fd)
    job = json.loads(Path(job_path).read_text())
    verdict = Evaluation(job, channel).run()
    channel.send(verdict=verdict.to_dict())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a broken extension must not crash after the verdict


if __name__ == "__main__":
    main()
