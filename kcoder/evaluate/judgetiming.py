"""The judge's use of its own clock (judgeclock.py): the gate pages handed to the processes,
the candidate's figure (a drawn call of every timed batch checked against the reference and
against its commitment), and the baselines' figures, all timed the same way."""

from __future__ import annotations

import random
import secrets
import time
from typing import Any

from kcoder.evaluate.harness.channel import ChannelError, Peer, time_value
from kcoder.evaluate.judgeclock import SAMPLES, BatchClock, Calibration, Endpoint, Figure, GatePage

AUDITS = 2  # guarded audit calls among the candidate's batches (torch compute refused there)
# GPU work on other streams outside the timed range, per call, beyond this share of the event
# time plus slack is work the timer did not see (timestamps of different streams jitter).
HIDDEN_WORK_SHARE = 0.02
HIDDEN_WORK_SLACK_US = 20.0


def gate_page(pages: dict[int, GatePage], peer: Peer, sock: Any, ask: Any) -> GatePage:
    """The gate page of the process behind `peer`, made and handed over once per process (`pages`
    by process id; `ask(op="gate")` the request that makes the process map it)."""
    from kcoder.evaluate.harness.handoff import send_fd

    pid = peer.proc.pid
    for gone in [p for p, page in pages.items() if page.process is not None and page.process.poll() is not None]:
        pages.pop(gone).close()  # a session's earlier candidates: their pages go with them
    if pid not in pages:
        page = GatePage()
        page.process = peer.proc
        try:
            send_fd(sock, page.fd)
        except OSError:
            page.close()
            raise
        ask(op="gate")
        pages[pid] = page
    return pages[pid]


def _gate(judge: Any, peer: Peer, sock: Any, ask: Any) -> GatePage | None:
    if judge.options.device != "cuda":
        return None
    try:
        return gate_page(judge.children.gate_pages, peer, sock, ask)
    except OSError as exc:
        judge.harness_error(f"handing the gate page over failed: {exc}")
        return None


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def candidate_endpoint(judge: Any, deadline: float) -> Endpoint:
    peer = judge.cand
    ask = lambda **request: judge.ask_candidate(_left(deadline), "timing", expect="gate", **request)  # noqa: E731
    return Endpoint(peer, lambda exc: judge.crash("timing", exc),
                    lambda reply, key: judge._expect(reply, key, "timing"),
                    _gate(judge, peer, judge.children.cand_share, ask))


def reference_endpoint(judge: Any, deadline: float) -> Endpoint:
    peer = judge.ref

    def fail(exc: ChannelError) -> None:
        judge.harness_error(f"the reference process failed while timed ({exc.kind}: {exc})",
                            judge.children.log_tail("reference"))

    def expect(reply: dict[str, Any], key: str) -> dict[str, Any]:
        if key not in judge.reference_reply(reply, "timing"):
            judge.harness_error(f"the reference process sent an unexpected reply (expected {key!r})")
        return reply

    ask = lambda **request: judge.ask_reference(_left(deadline), "timing", **request)  # noqa: E731
    return Endpoint(peer, fail, expect, _gate(judge, peer, judge.children.ref_share, ask))


def candidate_figure(judge: Any, deadline: float, output_bytes: int, calibration: Calibration) -> Figure:
    """The candidate's samples by the judge's clock. On the GPU one drawn call of every timed batch
    is checked (its output against the reference's for that call's inputs, and against the
    commitment its process sent before the clock stopped); on the cpu every batch runs in an
    arena (arenaclock.py: the reference process writes the inputs and reads the outputs)."""
    cuda = judge.options.device == "cuda"
    if cuda:
        clock = BatchClock(candidate_endpoint(judge, deadline), True, deadline)
    else:
        clock = arena_clock(judge, deadline)
    started = time.monotonic()

    audits = set(random.Random(secrets.randbits(64)).sample(range(SAMPLES), AUDITS))
    done = [0]

    def check(batch: Any) -> None:
        if cuda:  # an arena batch checked its own calls (arenaclock.py)
            judge.checked_batch_call(batch, secrets.randbelow(batch.n), deadline)
        if done[0] in audits:  # a guarded call between batches, at a call count no process can know
            judge.checked_call("timing", f"audit call after batch {done[0] + 1} of the judge's clock", deadline)
        done[0] += 1

    keep = output_bytes if cuda else judge.call_bytes  # an arena holds every call's inputs and outputs
    figure = clock.figure(calibration, keep, SAMPLES, judge.share_s(), on_batch=check)
    judge.stages.add("judge_clock", time.monotonic() - started)
    return figure


def arena_clock(judge: Any, deadline: float) -> BatchClock:
    """The cpu target's clock over the candidate's batches (arenaclock.py)."""
    from kcoder.evaluate.arenaclock import ArenaClock, CandidateSide
    from kcoder.evaluate.freeze import thaw

    side = CandidateSide(candidate_endpoint(judge, deadline), judge.children.cand_share,
                         judge.children.freeze_candidate, thaw,
                         lambda result, label: judge._judge_check(result, "timing", label))
    return ArenaClock(reference_endpoint(judge, deadline), judge.children.ref_share, deadline, candidate=side)


def baseline_figures(endpoint: Endpoint, cuda: bool, deadline: float, samples: int, budget_s: float,
                     compile_baseline: bool, stages: Any = None, output_bytes: int = 0,
                     calibration: Calibration | None = None,
                     share: Any = None) -> tuple[dict[str, list[float]], Calibration]:
    """Eager's and torch.compile's samples by the judge's clock, in the reference process behind
    `endpoint` (the judge's, or `kcoder baseline`'s), with no candidate process alive; and the
    calibration every implementation's batches are taken off by (measured first, when not given).
    `output_bytes` sizes the batches as the candidate's are (each keeps its outputs; on the cpu the
    inputs and outputs of a call, which an arena holds for every call)."""
    impls = ["eager"] + (["compile"] if compile_baseline else [])
    out: dict[str, list[float]] = {}
    for impl in impls:
        started = time.monotonic()
        if cuda:
            clock = BatchClock(endpoint, cuda, deadline, impl)
        else:  # arena batches (arenaclock.py): `share` the reference process's descriptor socket
            from kcoder.evaluate.arenaclock import ArenaClock

            clock = ArenaClock(endpoint, share, deadline, impl)
        if calibration is None:
            calibration = clock.calibrate(1 if cuda else output_bytes)
        out[impl] = clock.figure(calibration, output_bytes, samples, budget_s).samples
        if stages is not None:
            stages.add(f"baselines_{impl}", time.monotonic() - started)
    assert calibration is not None
    return out, calibration


def judge_figure(judge: Any, figure: Figure, reported_us: float) -> None:
    """The judge's clock against the candidate's own events: a note, or a refusal."""
    import statistics

    from kcoder.evaluate.judgeclock import disagreement

    median = statistics.median(figure.samples)
    judge.verdict.reported_us = reported_us
    judge.verdict.notes.append(
        f"judge's clock: {median:.1f} us per call over {len(figure.samples)} batches of {figure.n} calls, "
        f"{figure.taken_off_us:.1f} us per call of the batch's own cost taken off "
        f"(the candidate's process reported {reported_us:.1f} us per call)"
        + (f"; {figure.at_resolution} of them at the clock's resolution" if figure.at_resolution else "")
        + ("; its host was in the loop (it waits for the GPU within a call)" if figure.host_bound else ""))
    reason = disagreement(figure.samples, reported_us, figure.host_bound, figure.harness_us)
    if reason and judge.options.device == "cuda":
        judge.fail("timing", reason)
    elif reason:
        # On the cpu target the host is the device: the judge's wall clock over a batch carries every
        # process's load (the candidate's own spinners included), so a gap is no evidence there; the
        # figure is the judge's, so an under-report wins nothing.
        judge.verdict.notes.append(reason.replace("integrity: ", "note (cpu: not a refusal): ", 1))


def hidden_work_check(judge: Any, event_us: float, deadline: float) -> None:
    """GPU work outside the range the diagnostic timed calls' events measure (timedrange.py)."""
    if judge.options.device != "cuda":
        return
    reply = judge.ask_candidate(max(0.0, deadline - time.monotonic()), "timing", op="kernel_time", seed=judge.seed(),
                                expect="range")
    try:
        note, failure = judge_range(reply.get("range"), event_us)
    except ValueError as exc:
        judge.tampered(f"a profiler finding that {exc}")
    judge.verdict.notes.append(note)
    if failure:
        judge.fail("timing", failure)


def judge_range(found: Any, event_us: float) -> tuple[str, str]:
    """The judge's reading of a RangeFinding (as to_dict() sent it from the candidate's
    process) for a call whose events measured `event_us`: (a note, a failure reason or "").
    Raises ValueError when the finding is malformed."""
    if not isinstance(found, dict):
        raise ValueError("was not a record")
    kernel_us, other_us, outside_us = (time_value(found.get(key), allow_zero=True)
                                       for key in ("kernel_us", "other_streams_us", "outside_us"))
    if kernel_us is None or other_us is None or outside_us is None:
        raise ValueError("was not a number")
    problem = str(found.get("problem") or "")[:200]
    if problem:
        return (f"the profiler could not place the timed range ({problem}): work off the timed stream was "
                "judged by the judge's own clock only"), ""
    note = f"device kernel time per call {kernel_us:.1f} us (profiler, all streams)"
    if other_us > 0:
        note += f", {other_us:.1f} us of it on other streams than the timed one"
    if outside_us <= HIDDEN_WORK_SLACK_US + HIDDEN_WORK_SHARE * event_us:
        return note, ""
    by_stream = found.get("outside_by_stream")
    streams = ", ".join(str(k)[:12] for k in list(by_stream)[:4]) if isinstance(by_stream, dict) else ""
    return note, (f"integrity: {outside_us:.1f} us per call of GPU work ran outside the timed range (on stream "
                  f"{streams or '?'}, not the timed stream {str(found.get('timed_stream'))[:12]}, which saw "
                  f"{event_us:.1f} us): work runs outside the timed stream")
