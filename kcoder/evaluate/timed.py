"""The timing stage of an evaluation: baselines + candidate, checked and compared.

Glue between the worker's Evaluation and timing.measure(): builds the three implementations,
checks every timed candidate output, runs guarded audit calls, and on the GPU compares the
profiler's device-kernel time with the event time to expose work hidden on other streams.
"""

from __future__ import annotations

from typing import Any

# Device kernel time may exceed the event-measured time by this factor (plus a small
# absolute slack) before we conclude that work ran outside the timed stream.
HIDDEN_WORK_FACTOR = 1.3
HIDDEN_WORK_SLACK_US = 20.0


def run_timing(ev: Any) -> None:
    """Fill ev.verdict with timings and speed-ups; call ev.fail on any integrity problem."""
    import torch

    from kcoder.evaluate.compare import Mismatch, compare_outputs
    from kcoder.evaluate.timing import Clock, device_kernel_time_us, measure
    from kcoder.evaluate.verify import CandidateFailure, clone_inputs, guarded_call, make_inputs

    opts, v = ev.options, ev.verdict
    impls: dict[str, Any] = {"eager": ev.ref_model, "candidate": ev.new_model}
    if opts.compile_baseline:
        impls["compile"] = torch.compile(ev.ref_model)
    clock = Clock(opts.device)
    base_seed = opts.seed + 50_000

    def new_inputs(r: int) -> list[Any]:
        return make_inputs(ev.problem, base_seed + r, opts.device)

    def check(r: int, cand_out: Any, eager_out: Any) -> None:
        ev.integrity(f"timed call {r + 1}")
        try:
            ev._record_errors(compare_outputs(cand_out, eager_out, opts.precision))
        except Mismatch as exc:
            ev.fail("timing", f"timed call {r + 1} gave a wrong answer for its own inputs "
                    f"(cached or stale result?): {exc}")

    def audit(r: int, inputs: list[Any]) -> None:
        try:
            out = guarded_call(ev.new_model, clone_inputs(inputs), ev.guard, ev.sync)
        except CandidateFailure as exc:
            ev.fail("timing", f"audit call after timed round {r + 1}: {exc}")
        with torch.no_grad():
            ref = ev.ref_model(*clone_inputs(inputs))
        try:
            compare_outputs(out, ref, opts.precision)
        except Mismatch as exc:
            ev.fail("timing", f"audit call after timed round {r + 1}: wrong answer: {exc}")

    timings = measure(
        impls, candidate="candidate", new_inputs=new_inputs, check=check, audit=audit, clock=clock,
        warmup=opts.warmup, min_rounds=opts.min_rounds, max_rounds=opts.max_rounds,
        budget_s=opts.timing_budget_s, audit_every=opts.audit_every,
        fresh_copy=clone_inputs if ev.ref_mutates else None, seed=opts.seed)
    v.timing_rounds = len(timings.samples["candidate"])
    v.eager_us, v.eager_iqr_us = timings.median("eager"), timings.iqr("eager")
    v.candidate_us, v.candidate_iqr_us = timings.median("candidate"), timings.iqr("candidate")
    v.speedup_vs_eager = timings.speedup("eager", "candidate")
    v.speedup_vs_eager_ci = timings.speedup_ci("eager", "candidate")
    if "compile" in impls:
        v.compile_us, v.compile_iqr_us = timings.median("compile"), timings.iqr("compile")
        v.speedup_vs_compile = timings.speedup("compile", "candidate")
        v.speedup_vs_compile_ci = timings.speedup_ci("compile", "candidate")
    else:
        v.notes.append("torch.compile baseline skipped (--no-compile): speed-up vs compile unknown")
    if opts.device == "cuda":
        inputs = new_inputs(10_000)
        kernel_us = device_kernel_time_us(ev.new_model, inputs)
        v.notes.append(f"device kernel time per call {kernel_us:.1f} us (profiler, all streams)")
        if kernel_us > HIDDEN_WORK_FACTOR * v.candidate_us + HIDDEN_WORK_SLACK_US:
            ev.fail("timing", f"integrity: GPU kernels took {kernel_us:.1f} us per call but the timed "
                    f"stream saw {v.candidate_us:.1f} us: work runs outside the timed stream")
