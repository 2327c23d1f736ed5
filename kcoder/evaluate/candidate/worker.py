"""Candidate process: builds ModelNew and runs it when the judge asks. It decides nothing.

Run as `python -m kcoder.evaluate.candidate.worker JOB.json` inside the sandbox, with stdin/stdout
connected to the judge (see channel.py). It never sees the reference model: the problem
module is loaded for `get_inputs()` only (Model removed), the weights come from the reference
process as a file, and the seed of every input set arrives with the request that uses it, so
no output can be prepared in advance. Its checks (guard, poisoned allocations, unchanged
inputs, aliasing, integrity of timers and stream) are a second layer; the judge decides from
the outputs it receives and from its own clock.
"""

from __future__ import annotations

import faulthandler
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kcoder.build import inline as build
from kcoder.evaluate.candidate.batchops import BatchOps, Failure, HarnessFault
from kcoder.evaluate.candidate.batchops import copy_weights as _copy_weights
from kcoder.evaluate.candidate.harnesscheck import harness_fingerprint
from kcoder.evaluate.candidate.outbox import Outbox
from kcoder.evaluate.harness.channel import Link
from kcoder.evaluate.harness.loading import file_traceback, first_line, load_module, set_precision
from kcoder.evaluate.options import EvalOptions

CANDIDATE_MODULE = "kcoder_candidate"
# Requests after which the allocator's cache is kept: emptying it would make the next timed
# call pay cudaMalloc for its output, which the baselines' calls never do.
TIMING_OPS = {"warmup", "time", "save_last", "batch", "arena", "save_batch", "kernel_time", "peak", "verify", "gate"}


class CandidateServer(BatchOps):
    """Builds the candidate, then serves the judge's requests one by one."""

    def __init__(self, job: dict[str, Any], link: Link) -> None:
        self.job, self.link = job, link
        self.options = EvalOptions.from_dict(job["options"])
        self.device = self.options.device
        self.candidate_path = Path(job["candidate"])
        self.last: Any = None
        self.previous: Any = None  # the last verification output, kept to catch reuse
        self.batch_run: Any = None  # the last batch, its outputs kept for the judge's checks
        self.stamps = {"main": time.time()}  # wall-clock start-up stamps, for the verdict's stage times
        self.compile_s = 0.0  # seconds inside load_inline
        share_fd = job.get("handoff_fd")
        self.outbox = Outbox(share_fd if isinstance(share_fd, int) else None, self.device)

    # --- start-up -----------------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        notes = build.prepare_environment(self.device)
        import torch

        self.torch = torch
        compile_only = self.options.stop_after == "compile"  # no GPU visible: host work only
        if self.device == "cuda" and not compile_only:
            build.set_arch_for_device()
            torch.cuda.set_per_process_memory_fraction(self.options.gpu_memory_fraction)
        set_precision(torch, self.options.precision)
        self.stamps["torch"] = time.time()
        build.install_build_wrapper(fast=self.options.fast_build)
        self._announce_compiles()
        self.problem = _inputs_only(load_module(Path(self.job["problem"]), "kcoder_problem_inputs"))
        # What the checks compare against is taken before the candidate's code runs: a
        # replacement made while it is imported shows as well.
        self.timers = harness_fingerprint(torch, CandidateServer)
        started = time.perf_counter()
        model_cls = self._import_candidate()
        self.stamps["imported"] = time.time()
        # The judge says when the reference process has written the weights: both processes
        # start (import torch, build) at the same time.
        if self.link.receive() is None:
            raise SystemExit(0)
        self.stamps["init"] = time.time()
        self.link.phase("init")
        self.model = None if compile_only else self._instantiate(model_cls)
        seconds = round(time.perf_counter() - started, 3)
        self.threads = threading.active_count()
        records = [build.describe(r) for r in build.BUILD_RECORDS]
        from kcoder.build import detached

        self.stamps["built"] = time.time()
        jobs = detached.pending() + len(build.REMOTE_BACKGROUND)  # kcoder's builders' jobs count too
        return {"built": True, "notes": notes + records, "seconds": seconds, "background_jobs": jobs,
                "stamps": self.stamps, "compile_s": round(self.compile_s, 3)}

    def _announce_compiles(self) -> None:
        """Tell the judge when load_inline is compiling: the compiler has its own time limit."""
        import torch.utils.cpp_extension as cpp_extension

        inner, link = cpp_extension.load_inline, self.link

        def announcing_load_inline(*args: Any, **kwargs: Any) -> Any:
            link.phase("compile")
            started = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.compile_s += time.time() - started
                link.phase("import")

        announcing_load_inline.__wrapped__ = inner  # type: ignore[attr-defined]
        cpp_extension.load_inline = announcing_load_inline

    def _import_candidate(self) -> Any:
        self.link.phase("import")
        try:
            module = load_module(self.candidate_path, CANDIDATE_MODULE)
        except build.BuildError as exc:
            raise Failure("build", str(exc), exc.log) from None
        except Exception as exc:
            where, text = file_traceback(exc, str(self.candidate_path))
            raise Failure("build", f"the candidate raised while loading{where}: {first_line(exc)}", text) from None
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            raise Failure("build", "the candidate defines no ModelNew")
        return model_cls

    def _instantiate(self, model_cls: Any) -> Any:
        torch = self.torch
        init_inputs = torch.load(self.job["init_path"], weights_only=True)
        weights = torch.load(self.job["weights_path"], weights_only=True, map_location=self.device)
        try:
            torch.manual_seed(self.options.seed)
            model = model_cls(*init_inputs).to(self.device)
            _copy_weights(weights, model)
        except Exception as exc:
            where, text = file_traceback(exc, str(self.candidate_path))
            raise Failure("build", f"ModelNew(*get_init_inputs()) raised{where}: {first_line(exc)}", text) from None
        return model

    # --- requests -----------------------------------------------------------------------------
    def serve(self) -> None:
        while (request := self.link.receive()) is not None:
            op = request.pop("op", "")
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                self.link.reply(error=f"unknown request {op!r}")
                continue
            try:
                self.link.reply(**handler(**request))
            except Failure as exc:
                self.link.reply(fail={"stage": exc.stage, "reason": exc.reason, "log": exc.log})
            except HarnessFault as exc:
                self.link.reply(error=str(exc))
            if op not in TIMING_OPS:
                self._release()

    def inputs(self, seed: int, rows: int | None = None) -> list[Any]:
        """Input set `seed`; at batch size `rows` when given (drawnshapes.py)."""
        from kcoder.evaluate.harness.verify import batch_inputs, make_inputs

        try:
            if rows:
                return batch_inputs(self.problem, seed, self.device, rows)
            return make_inputs(self.problem, seed, self.device)
        except Exception as exc:
            at = f" at batch size {rows}" if rows else ""
            raise HarnessFault(f"generating inputs{at}: {first_line(exc)}") from None

    def op_verify(self, seed: int, path: str, label: str, rows: int | None = None) -> dict[str, Any]:
        """A guarded call on fresh inputs; local checks; the output saved for the judge.

        Memory stays near one input set: the output is saved and freed before the inputs are
        compared with a copy made again from the seed; only the previous verification output
        stays alive (so its memory cannot be handed out again, and reuse shows).
        rows: the input set at that batch size (drawnshapes.py); an exception the candidate
        raises there is its answer ("raised"), not a failure: a kernel may be made for its shapes."""
        from kcoder.evaluate.harness.verify import CandidateFailure, check_aliasing, check_unchanged

        stage = "verify" if label.startswith("input set") else "timing"
        prefix = "" if stage == "verify" else f"{label}: "
        fresh = lambda: self.inputs(seed, rows)  # noqa: E731  made again for the checks below
        inputs = fresh()
        try:
            try:
                out = self._guarded(inputs, stage)
            except Failure as exc:
                if not rows:
                    raise
                return {"answered": True, "raised": exc.reason[:300]}
            try:
                check_aliasing(inputs, out, self.previous, label)
            except CandidateFailure:  # an output in place of an input: say so if it was modified
                check_unchanged(inputs, fresh(), label)
                raise
            self._integrity(stage, label)
            reply = self._save(out, path)
            if stage == "verify":
                self.previous = out
            del out
            if stage == "verify":  # during timing, keep the allocator's blocks as eager's calls find them
                self._release()
            check_unchanged(inputs, fresh(), label)
        except CandidateFailure as exc:
            raise Failure(stage, f"{prefix}{exc}") from None
        except Failure as exc:
            raise Failure(stage, f"{prefix}{exc.reason}", exc.log) from None
        return {**reply, "answered": True} if rows else reply

    def op_warmup(self, seeds: list[int]) -> dict[str, Any]:
        from kcoder.evaluate.harness.timing import Clock

        self.clock = Clock(self.device)
        if self.device == "cuda":  # the timing's own peak, whether or not this process verified first
            self.torch.cuda.reset_peak_memory_stats()
        for i, seed in enumerate(seeds):
            inputs = self.inputs(seed)
            with self.torch.no_grad():
                if i == 0:  # first calls (caches, lazy init) teach the clock nothing
                    self._call(inputs, "timing")
                else:
                    self._call(lambda x=inputs: self.clock.call(self.model, x), "timing", direct=True)
            self.clock.sync()
        return {"warm": True}

    def op_time(self, seed: int) -> dict[str, Any]:
        """One timed call on fresh inputs; the output is kept until the next request (the judge
        may ask for it). The previous one is dropped first and the allocator keeps its blocks,
        so the call allocates its output as eager's timed calls do, from the allocator's cache,
        never through cudaMalloc inside the timed range (at multi-GB outputs that cost ~14%)."""
        self.last = None
        inputs = self.inputs(seed)
        carveout = self.clock.reset_persisting_l2()
        with self.torch.no_grad():
            out, read = self._call(lambda: self.clock.call(self.model, inputs), "timing", direct=True)
        self.clock.sync()
        self._integrity("timing", "a timed call")
        self.last = out
        return {"us": read(), "l2_carveout": carveout}

    def op_save_last(self, path: str) -> dict[str, Any]:
        return self._save(self.last, path)

    def op_kernel_time(self, seed: int) -> dict[str, Any]:
        """A few calls under the profiler, timed as op_time's are: where their GPU work ran
        (timedrange.py; the judge decides)."""
        from kcoder.evaluate.candidate.timedrange import profile_timed_range

        inputs = self.inputs(seed)
        finding = self._call(lambda: profile_timed_range(self.clock, self.model, inputs), "timing", direct=True)
        self._integrity("timing", "the profiled calls")
        return {"range": finding.to_dict()}

    # --- helpers ------------------------------------------------------------------------------
    def _guarded(self, inputs: list[Any], stage: str) -> Any:
        from kcoder.evaluate.candidate.guard import Guard
        from kcoder.evaluate.harness.verify import guarded_call

        self.guard = Guard(str(self.candidate_path), list(self.options.allow))
        return self._call(lambda: guarded_call(self.model, inputs, self.guard, self.sync), stage, direct=True)

    def _call(self, fn: Any, stage: str, direct: bool = False) -> Any:
        """Run the candidate; its exceptions become a Failure with a reason that names the cause."""
        from kcoder.evaluate.harness.verify import CandidateFailure

        try:
            return fn() if direct else self.model(*fn)
        except (CandidateFailure, Failure):
            raise
        except Exception as exc:
            raise Failure(stage, *_describe_exception(exc, str(self.candidate_path))) from None

    def _save(self, out: Any, path: str) -> dict[str, Any]:
        """The output to the reference process (outbox.py): by descriptor, else through `path`."""
        from kcoder.evaluate.candidate.outbox import NotPlain

        try:
            return self.outbox.deliver(out, path)
        except NotPlain as exc:  # the candidate's failure, not kcoder's
            raise Failure("verify", str(exc)) from None
        except Exception as exc:
            raise HarnessFault(f"saving the output: {first_line(exc)}") from None

    def _integrity(self, stage: str, when: str) -> None:
        torch = self.torch
        if harness_fingerprint(torch, CandidateServer) != self.timers:
            raise Failure(stage, f"integrity: timing or harness functions were replaced (seen after {when})")
        if self.device == "cuda" and torch.cuda.current_stream() != torch.cuda.default_stream():
            raise Failure(stage, f"integrity: the candidate changed the current CUDA stream (seen after {when})")
        if threading.active_count() != self.threads:
            raise Failure(stage, "integrity: the candidate started Python threads")

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _release(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()

    def peak_mb(self) -> float:
        """Peak device memory of this process, without the clock's fixed L2-flush buffer."""
        if self.device != "cuda":
            return 0.0
        clock = getattr(self, "clock", None)
        fixed = clock.flush_buffer.nbytes if clock is not None else 0
        shared = self.outbox.shared_bytes()  # outside torch's allocator (outbox.py)
        return (self.torch.cuda.max_memory_allocated() - fixed + shared) / 2**20

    def op_finish(self, wait_s: float) -> dict[str, Any]:
        """Let background build jobs (the precompiled header) finish before the sandbox ends."""
        from kcoder.build import detached

        return {"finished": True, "still_running": detached.wait_spawned(wait_s)}

    def op_peak(self) -> dict[str, Any]:
        return {"peak_mb": self.peak_mb()}


def _inputs_only(problem: Any) -> Any:
    """The problem module without its Model: this process can make inputs, not answers."""
    if hasattr(problem, "Model"):
        delattr(problem, "Model")
    return problem


# What an exception's message says of its cause (first match), for the verdict's reason.
ILLEGAL = "illegal memory access in a CUDA kernel"
EXCEPTION_KINDS = (("out of memory", "CUDA out of memory"), ("illegal memory access", ILLEGAL),
                   ("illegal address", ILLEGAL), ("cuda error", "CUDA error"), ("acceleratorerror", "CUDA error"))


def _describe_exception(exc: BaseException, candidate: str) -> tuple[str, str]:
    where, text = file_traceback(exc, candidate)
    message = first_line(exc)
    kind = next((kind for key, kind in EXCEPTION_KINDS if key in message.lower()), "the candidate raised")
    return f"{kind}{where}: {message}", text


def main() -> None:
    link = Link()
    faulthandler.enable()  # a segfault still prints the Python stack to the log
    job = json.loads(Path(sys.argv[1]).read_text())
    server = CandidateServer(job, link)
    try:
        link.reply(**server.start())
    except Failure as exc:
        link.reply(fail={"stage": exc.stage, "reason": exc.reason, "log": exc.log})
    else:
        server.serve()
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(0)  # skip interpreter teardown: a broken extension must not crash after the work


if __name__ == "__main__":
    main()
