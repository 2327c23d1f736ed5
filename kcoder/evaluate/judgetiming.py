"""The judge's use of its own clock (judgeclock.py): the gate pages handed to the processes,
the candidate's figure (a drawn call of every timed batch checked against the reference and
against its commitment), and the baselines' figures, all timed the same way."""

from __future__ import annotations

import secrets
import time
from typing import Any

from kcoder.evaluate.channel import ChannelError, Peer
from kcoder.evaluate.judgeclock import SAMPLES, BatchClock, Endpoint, Figure, GatePage

PROBE_CALLS = 4  # a first batch pair sizes the batches of an implementation


def gate_page(pages: dict[int, GatePage], peer: Peer, sock: Any, ask: Any) -> GatePage:
    """The gate page of the process behind `peer`, made and handed over once per process (`pages`
    by process id; `ask(op="gate")` the request that makes the process map it)."""
    from kcoder.evaluate.handoff import send_fd

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
    pages: dict[int, GatePage] = judge.children.__dict__.setdefault("gate_pages", {})
    try:
        return gate_page(pages, peer, sock, ask)
    except OSError as exc:
        judge.harness_error(f"handing the gate page over failed: {exc}")
        return None


def candidate_endpoint(judge: Any) -> Endpoint:
    peer = judge.cand
    ask = lambda **request: judge.ask_candidate(judge.left(), "timing", expect="gate", **request)  # noqa: E731
    return Endpoint(peer, lambda exc: judge.crash("timing", exc),
                    lambda reply, key: judge._expect(reply, key, "timing"),
                    _gate(judge, peer, judge.children.cand_share, ask))


def reference_endpoint(judge: Any) -> Endpoint:
    peer = judge.ref

    def fail(exc: ChannelError) -> None:
        judge.harness_error(f"the reference process failed while timed ({exc.kind}: {exc})",
                            judge.children.log_tail("reference"))

    def expect(reply: dict[str, Any], key: str) -> dict[str, Any]:
        if "error" in reply or "problem" in reply:
            judge.harness_error(f"the reference process failed while timed: "
                                f"{str(reply.get('error') or reply.get('problem'))[:300]}")
        if key not in reply:
            judge.harness_error(f"the reference process sent an unexpected reply (expected {key!r})")
        return reply

    ask = lambda **request: judge.ask_reference(judge.left(), "timing", **request)  # noqa: E731
    return Endpoint(peer, fail, expect, _gate(judge, peer, judge.children.ref_share, ask))


def _hint_us(clock: BatchClock) -> float:
    """The implementation's time per call from a small batch pair (sizes the batches): its own,
    but never under a quarter of the whole batch's per call (noise can make its own look like
    nothing, and a batch sized for nothing would keep thousands of outputs)."""
    cal = clock.batch(PROBE_CALLS, calibration=True)
    run = clock.batch(PROBE_CALLS, calibration=False)
    own = (run.seconds - cal.seconds) / PROBE_CALLS * 1e6
    return max(own, run.seconds / PROBE_CALLS * 1e6 / 4, 1.0)


def candidate_figure(judge: Any, deadline: float, output_bytes: int) -> Figure:
    """The candidate's samples by the judge's clock; one drawn call of every timed batch is
    checked (its output against the reference's for that call's inputs, and against the
    commitment its process sent before the clock stopped)."""
    clock = BatchClock(candidate_endpoint(judge), judge.options.device == "cuda", deadline)
    started = time.monotonic()

    def check(batch: Any) -> None:
        call = secrets.randbelow(batch.n)
        judge.checked_batch_call(batch, call, deadline)

    figure = clock.figure(_hint_us(clock), output_bytes, SAMPLES, judge.share_s(), on_batch=check)
    judge.stages.add("judge_clock", time.monotonic() - started)
    return figure


def baseline_figures(endpoint: Endpoint, cuda: bool, deadline: float, samples: int, budget_s: float,
                     compile_baseline: bool, stages: Any = None, output_bytes: int = 0) -> dict[str, list[float]]:
    """Eager's and torch.compile's samples by the judge's clock, in the reference process behind
    `endpoint` (the judge's, or `kcoder baseline`'s); `output_bytes` sizes the batches as the
    candidate's are (each keeps its outputs)."""
    impls = ["eager"] + (["compile"] if compile_baseline else [])
    out: dict[str, list[float]] = {}
    for impl in impls:
        started = time.monotonic()
        clock = BatchClock(endpoint, cuda, deadline, impl)
        out[impl] = clock.figure(_hint_us(clock), output_bytes, samples, budget_s).samples
        if stages is not None:
            stages.add(f"baselines_{impl}", time.monotonic() - started)
    return out


def judge_figure(judge: Any, figure: Figure, reported_us: float) -> None:
    """The judge's clock against the candidate's own events: a note, or a refusal."""
    import statistics

    from kcoder.evaluate.judgeclock import disagreement

    median = statistics.median(figure.samples)
    judge.verdict.notes.append(
        f"judge's clock: {median:.1f} us per call over {len(figure.samples)} batches of {figure.n} calls "
        f"(the candidate's process reported {reported_us:.1f} us per call)"
        + ("; its host was in the loop (it waits for the GPU within a call)" if figure.host_bound else ""))
    reason = disagreement(figure.samples, reported_us, figure.host_bound)
    if reason:
        judge.fail("timing", reason)


def hidden_work_check(judge: Any, event_us: float, deadline: float) -> None:
    """GPU work outside the range the diagnostic timed calls' events measure (timedrange.py)."""
    from kcoder.evaluate.timedrange import judge_range

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
