"""The judge: decides a verdict from what it can check itself. No candidate code runs here.

Two child processes do the work: the reference process (trusted; loads the problem, never
the candidate) and the candidate's process (sandboxed; never sees the reference model).
For every input set the judge draws a fresh seed, the candidate's process runs the
candidate and saves its output, and the reference process compares that output with its
own. Baselines are timed by the reference process while no candidate process is alive
(half before the candidate's timing, half after it was killed), so background load cannot
slow them. Every figure is the judge's own clock (judgeclock.py, judgetiming.py); the
candidate's in-process events are a diagnostic that clock must confirm.
"""

from __future__ import annotations

import os
import random
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

from kcoder.evaluate.basetimer import Baselines
from kcoder.evaluate.drawnshapes import output_factor, verify_at_drawn_shapes
from kcoder.evaluate.drawnweights import verify_with_drawn_weights
from kcoder.evaluate.harness.channel import ChannelError, Peer, time_value, trace
from kcoder.evaluate.judgenotes import VerdictNotes
from kcoder.evaluate.judgetiming import candidate_figure, hidden_work_check, judge_figure
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.ownrounds import candidate_rounds
from kcoder.evaluate.reference.sol import record_sol
from kcoder.evaluate.spawn import Children
from kcoder.evaluate.stagetimes import StageClock
from kcoder.evaluate.summary import record_errors, record_timings
from kcoder.evaluate.timings import Timings
from kcoder.problem import ProblemError
from kcoder.verdict import Verdict

TIMING_CHECK_BUDGET_MB = 16 * 1024  # outputs checked during timing, in MiB (at least MIN_TIMING_CHECKS)
MIN_TIMING_CHECKS = 4


class Stop(Exception):
    """The verdict is decided (failed, or finished early)."""


class Judge:
    def __init__(self, problem: Path, candidate: Path, options: EvalOptions, verdict: Verdict,
                 children: Children) -> None:
        self.problem, self.candidate, self.options = problem, candidate, options
        self.verdict, self.children = verdict, children
        self.rng = random.Random(secrets.randbits(64))
        self.cand: Peer | None = None
        self.background_jobs = 0
        self.timing_checks_left = MIN_TIMING_CHECKS
        self.broken = False  # the candidate's channel failed: never wait on it again
        self.stages = StageClock()  # where the seconds go (verdict.seconds)
        self.spawned = 0.0  # wall clock just before the candidate's latest start
        self.output_bytes = 0  # one reference output's bytes (the bound on a shared output's)
        self.call_bytes = 0  # one call's inputs and output (what an arena holds per call)
        self.batch, self.footprint_mb = 0, 0.0  # the problem's batch size (0: none) and one call's MB
        self.notes = VerdictNotes(verdict)  # notes that say what the checks saw (judgenotes.py)

    def seed(self) -> int:
        return self.rng.randrange(1, 2**31)

    # --- the stages ---------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._stages()
        except Stop:
            pass
        finally:
            self.stop_candidate()
            self.stages.into(self.verdict.seconds)

    def stop_candidate(self) -> None:
        """End the candidate's processes (a healthy one may first finish kcoder's background builds)."""
        healthy = self.background_jobs > 0 and not self.broken
        self.children.stop_candidate(self.cand if healthy else None)
        self.background_jobs = 0

    def _stages(self) -> None:
        v, opts = self.verdict, self.options
        compile_only = opts.stop_after == "compile"  # host work only: no reference process, no ModelNew
        self.cand = self.start_candidate()  # it builds while the judge waits for the device
        self.ref = None
        info = {} if compile_only else self.open_reference(time.time())  # and the problem loads
        v.torch_version, v.device_name = info.get("torch_version", ""), info.get("device_name", "")
        v.notes.extend(info.get("notes", []))
        v.reference_peak_mb, v.footprint_mb = _round(info.get("reference_peak_mb")), _round(info.get("footprint_mb"))
        # Every checked output makes a trip between the processes: at real sizes, checks during timing are rationed.
        output_mb = info.get("output_mb") if isinstance(info.get("output_mb"), (int, float)) else 0.0
        footprint_mb = info.get("footprint_mb") if isinstance(info.get("footprint_mb"), (int, float)) else 0.0
        self.footprint_mb = footprint_mb
        self.batch = info.get("batch") if type(info.get("batch")) is int else 0
        shared_mb = output_mb * output_factor(opts, self.batch, footprint_mb)  # drawn batch sizes' outputs fit too
        self.output_bytes = int(shared_mb * 2**20) + 1
        self.call_bytes = int(max(footprint_mb - output_mb, output_mb) * 2**20) + 1  # a call's inputs and output
        self.timing_checks_left = max(MIN_TIMING_CHECKS, int(TIMING_CHECK_BUDGET_MB / max(output_mb, 1.0)))
        self.children.use_shared_memory(shared_mb * 2**20)
        self.finish_start(first=True)
        if opts.stop_after in ("compile", "build"):
            v.reason = "compiled"
            return
        self.verify_sets()
        if opts.stop_after == "verify":
            v.reason, v.reward = "correct (not timed)", 1
            return
        self.time_all()

    def open_reference(self, spawned: float) -> dict[str, Any]:
        """The reference process and its start-up reply: started now (`spawned`: the wall clock
        before), or a session's (session.py), kept from an earlier candidate and reset for this
        one: its inputs, model, compiled baseline and start-up reply are reused."""
        children = self.children
        if children.keep is not None and children.ref_info is not None and children.reference_alive():
            self.ref = children.reuse_reference()
            self.ask_reference(None, "reset", op="reset", init_path=str(children.handoff / "init.pt"),
                               weights_path=str(children.handoff / "weights.pt"))
            return dict(children.ref_info)
        self.ref = children.start_reference()
        info = self.ask_reference(None, "problem")
        self.stages.reference_started(spawned, info)
        if children.keep is not None:
            children.ref_info = info
        return info

    def start_candidate(self) -> Peer:
        """A candidate process; the judge's side of its start (copies, sandbox, spawn) is timed."""
        self.spawned = time.time()
        cand = self.children.start_candidate()
        self.stages.add("sandbox", time.time() - self.spawned)
        return cand

    def finish_start(self, first: bool) -> None:
        """Let the started candidate process instantiate ModelNew (the reference's weights
        are written by now) and take its build report."""
        v = self.verdict
        v.stage = "build"
        started = time.perf_counter()
        assert self.cand is not None
        try:
            self.cand.send(op="init")
        except ChannelError:
            pass  # it failed or died while building: its reply (or its exit) is read next
        built = self._expect(self._receive(self.cand, None, "build"), "built", "build")
        self.refuse_static_findings()
        self.stages.candidate_built(self.spawned, built, first)
        jobs = built.get("background_jobs")
        self.background_jobs = jobs if isinstance(jobs, int) else 0
        if first:
            v.compiled = True
            notes = built.get("notes")  # the candidate's process wrote these: data, bounded
            v.notes.extend(str(n)[:300] for n in (notes if isinstance(notes, list) else [])[:20])
            # the import and init of the candidate, as its process measured them (information only)
            seconds = time_value(built.get("seconds"), allow_zero=True)
            v.seconds["build"] = seconds if seconds is not None else round(time.perf_counter() - started, 3)

    def refuse_static_findings(self) -> None:
        """A build the build service refused for what its sources compile (static/compiled.py) is
        the verdict's, whatever the candidate's process made of the refusal (it is untrusted)."""
        builds = self.children.builds
        if builds is not None and builds.static_findings:
            self.fail("build", builds.static_findings[0], "\n".join(builds.static_findings))

    def verify_sets(self) -> None:
        v, n = self.verdict, self.options.n_input_sets
        v.stage = "verify"
        started = time.perf_counter()
        deadline = time.monotonic() + self.options.verify_timeout_s
        for i in range(n):
            self.checked_call("verify", f"input set {i + 1} of {n}", deadline)
        verify_with_drawn_weights(self, deadline)
        verify_at_drawn_shapes(self, self.batch, self.footprint_mb, deadline)
        v.n_input_sets = n
        v.notes.extend(self.ask_reference(_left(deadline), "verify", op="notes").get("notes", []))
        v.correct = True
        v.seconds["verify"] = round(time.perf_counter() - started, 3)

    def checked_call(self, stage: str, label: str, deadline: float, save_last: bool = False) -> None:
        """The candidate's output for a fresh input set (or its last timed call), judged by the
        reference process."""
        if stage == "timing":
            if self.timing_checks_left <= 0:
                self.notes.rationed(TIMING_CHECK_BUDGET_MB)
                return
            self.timing_checks_left -= 1
        seed = self.last_seed if save_last else self.seed()
        path = str(self.children.box.outputs / f"out-{secrets.token_hex(8)}.pt")
        if save_last:
            reply = self.ask_candidate(_left(deadline), stage, op="save_last", path=path, expect="saved")
        else:
            reply = self.ask_candidate(_left(deadline), stage, op="verify", seed=seed, path=path, label=label,
                                       expect="saved")
        result = self.ask_reference(_left(deadline), stage, op="check", seed=seed, path=path, label=label,
                                    **self.pass_output(reply))
        self._judge_check(result, stage, label)

    def checked_batch_call(self, batch: Any, call: int, deadline: float) -> None:
        """Call `call` of a timed batch: its kept output against the reference's for the inputs
        that call saw, and against the commitment sent before the judge's clock stopped."""
        label = f"call {call + 1} of a batch of {batch.n} timed by the judge's clock"
        path = str(self.children.box.outputs / f"out-{secrets.token_hex(8)}.pt")
        reply = self.ask_candidate(_left(deadline), "timing", op="save_batch", index=call, path=path, expect="saved")
        result = self.ask_reference(_left(deadline), "timing", op="check", seed=batch.seed, path=path, label=label,
                                    batch={"key": batch.key, "n": batch.n, "call": call},
                                    commitment=batch.commitments[call], **self.pass_output(reply))
        self._judge_check(result, "timing", label)

    def pass_output(self, reply: dict[str, Any]) -> dict[str, Any]:
        """An output that travels by descriptor (handoff.py): its layout checked, its descriptor
        passed from the candidate's socket to the reference's; the request's extra fields."""
        from kcoder.evaluate.harness import handoff

        layout = reply.get("shared")
        if layout is None:  # it went through the file (information only: the candidate's word)
            note = f"an output went through a file, not by descriptor: {str(reply.get('unshared'))[:160]}"
            if note not in self.verdict.notes:
                self.verdict.notes.append(note)
            return {}
        cand, ref = self.children.cand_share, self.children.ref_share
        assert cand is not None and ref is not None
        try:
            handoff.validate(layout, handoff.bytes_bound(self.output_bytes))
            fd = handoff.receive_fd(cand)
        except handoff.HandoffError as exc:
            self.tampered(f"an output descriptor that does not hold what it claims: {exc}")
        try:
            if handoff.drain(cand):
                self.tampered("more output descriptors than outputs")
            handoff.send_fd(ref, fd)
        except OSError as exc:
            self.harness_error(f"passing an output to the reference process failed: {exc}",
                               self.children.log_tail("reference"))
        finally:
            os.close(fd)
        return {"shared": layout}

    def _judge_check(self, result: dict[str, Any], stage: str, label: str) -> None:
        """Fail on the reference process's finding; keep the error statistics otherwise."""
        if result.get("ok"):
            record_errors(self.verdict, result.get("stats") or {})
            self.notes.rule(str(result.get("rule") or ""), label)
            return
        if "mismatch" not in result:
            self.fail(stage, str(result.get("reason", f"{label}: wrong answer")))
        if stage == "verify":
            self.fail(stage, f"wrong answer on {label}: {result['mismatch']}")
        self.fail(stage, f"{label} gave a wrong answer for its own inputs (cached or stale result?): "
                         f"{result['mismatch']}")

    # --- timing -------------------------------------------------------------------------------
    def time_all(self) -> None:
        v, opts = self.verdict, self.options
        v.stage = "timing"
        started = time.perf_counter()
        deadline = time.monotonic() + opts.timing_timeout_s
        self.base = base = Baselines(self)
        # Cached baselines: none is timed before the candidate's rounds, so its process goes on
        restart = not base.cached or self.background_jobs > 0
        if restart:
            self.stop_candidate()  # nothing of the candidate runs while baselines are timed
        record_sol(v, base.first(deadline))
        if restart:
            self.cand = self.start_candidate()
            self.finish_start(first=False)
        v.stage = "timing"
        events = candidate_rounds(self, deadline)  # the candidate's process's own figure: a diagnostic
        figure = candidate_figure(self, deadline, self.output_bytes, base.calibration)
        judge_figure(self, figure, statistics.median(events))
        hidden_work_check(self, statistics.median(events), deadline)
        self.record_peak(deadline)
        self.stop_candidate()
        samples = base.last(deadline, figure.samples)
        samples["candidate"] = figure.samples
        record_timings(self.verdict, Timings(samples), too_fast=figure.negligible == len(figure.samples))
        v.seconds["timing"] = round(time.perf_counter() - started, 3)

    def share_s(self) -> float:
        """Measured seconds per implementation: the timing budget split among the candidate and the baselines."""
        return self.options.timing_budget_s / (3 if self.options.compile_baseline else 2)

    def time_baselines(self, deadline: float, samples: int, calibration: Any) -> tuple[dict[str, list[float]], Any]:
        """Eager's and torch.compile's samples by the judge's clock, and the calibration (measured when None)."""
        from kcoder.evaluate.judgetiming import baseline_figures, reference_endpoint

        cuda = self.options.device == "cuda"
        return baseline_figures(reference_endpoint(self, deadline), cuda, deadline,
                                samples, self.share_s() / 2, self.options.compile_baseline, self.stages,
                                self.output_bytes if cuda else self.call_bytes, calibration, self.children.ref_share)

    def record_peak(self, deadline: float) -> None:
        if self.options.device == "cuda":
            cand = time_value(self.ask_candidate(_left(deadline), "timing", op="peak", expect="peak_mb").get("peak_mb"),
                              allow_zero=True)
            ref = self.ask_reference(_left(deadline), "timing", op="peak").get("peak_mb", 0.0)
            self.verdict.peak_memory_mb = _round((cand or 0.0) + float(ref))

    # --- talking to the children --------------------------------------------------------------
    def ask_reference(self, limit_s: float | None, stage: str, **request: Any) -> dict[str, Any]:
        """A request to the reference process (or its start-up reply when `request` is empty)."""
        started = time.perf_counter()
        try:
            reply = self.ref.request(limit_s, **request) if request else self.ref.receive(limit_s)
            trace("reference", request.get("op", stage), started)
            self.stages.add_request("reference", request.get("op", stage), stage, time.perf_counter() - started)
        except ChannelError as exc:
            self.harness_error(f"the reference process failed during {stage} ({exc.kind}: {exc})",
                               self.children.log_tail("reference"))
        return self.reference_reply(reply, stage)

    def reference_reply(self, reply: dict[str, Any], stage: str) -> dict[str, Any]:
        """A reply of the reference process's: its problem's failure raised, kcoder's an error."""
        if "problem" in reply:
            raise ProblemError(f"{self.problem}: {reply['problem']}")
        if "error" in reply:
            self.harness_error(f"the reference process failed during {stage}: {reply['error']}")
        return reply

    def ask_candidate(self, limit_s: float | None, stage: str, expect: str, **request: Any) -> dict[str, Any]:
        cand = self.cand
        assert cand is not None
        try:
            cand.send(**request) if request else None
        except ChannelError as exc:
            self.crash(stage, exc)
        started = time.perf_counter()
        reply = self._receive(cand, limit_s, stage)
        trace("candidate", request.get("op", stage), started)
        self.stages.add_request("candidate", request.get("op", stage), stage, time.perf_counter() - started)
        return self._expect(reply, expect, stage)

    def _receive(self, cand: Peer, limit_s: float | None, stage: str) -> dict[str, Any]:
        try:
            return cand.receive(limit_s)
        except ChannelError as exc:
            self.crash(stage, exc)
            raise  # unreachable: crash() raises Stop

    def _check_reply(self, reply: dict[str, Any], stage: str) -> dict[str, Any]:
        if "fail" in reply:
            fail = reply["fail"] if isinstance(reply["fail"], dict) else {}
            self.fail(str(fail.get("stage", stage))[:20], str(fail.get("reason", "failed")), str(fail.get("log", "")))
        if "error" in reply:
            self.harness_error(f"kcoder's step in the candidate's process failed during {stage}: "
                               f"{str(reply['error'])[:200]}")
        return reply

    def _expect(self, reply: dict[str, Any], key: str, stage: str) -> dict[str, Any]:
        """Every reply must answer the request it follows: a forged or out-of-order line shows."""
        reply = self._check_reply(reply, stage)
        if reply.get(key) is None or reply.get(key) is False:
            self.tampered(f"an unexpected reply during {stage} (expected {key!r})")
        return reply

    # --- endings --------------------------------------------------------------------------------
    def fail(self, stage: str, reason: str, log: str = "") -> None:
        self.verdict.fail(stage, reason, log)
        raise Stop

    def tampered(self, what: str) -> Any:
        self.fail(self.verdict.stage, f"tampering: the candidate's process sent {what}")

    def harness_error(self, message: str, log: str = "") -> None:
        self.verdict.error(message, log)
        raise Stop

    def crash(self, stage: str, exc: ChannelError) -> None:
        from kcoder.evaluate.crash import crash_reason

        self.broken = True
        phase = exc.phase if exc.phase in ("import", "compile", "init") and stage == "build" else stage
        reason = crash_reason(exc, phase, self.children.candidate_returncode(), self.options,
                              self.children.log_tail("candidate"))
        self.fail(stage, reason, self.children.log_tail("candidate"))


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _round(value: Any) -> float | None:
    return round(float(value), 1) if isinstance(value, (int, float)) else None
