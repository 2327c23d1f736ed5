"""GPU work outside the timed range: the profiler's trace of a few calls timed as Clock.call
times them, each kernel's stream and timestamps against the range the events measure.

The events on the current stream measure from the end of the clock's head start to the end of
the call's work on that stream. Work on another stream is inside that range when it starts
after the head start and ends before the stream's last kernel of the call (a library that runs
kernels of its own on internal streams joins them back before it returns: cuDNN, cuBLAS);
work that begins during the head start or runs on after the call's end is work the events do
not see, whoever launched it. So the rule never counts kernel time against event time (a
library's overlapping kernels, on its own streams or with programmatic dependent launch on
the current one, add up to more than the time they take) and never refuses an honest library
call that eager makes too.

Each profiled call is: the L2 flush, the head start (a sleep kernel, the start marker), the
call, a short sleep (the end marker), a device synchronize. The markers are told apart by a
random profiler range around their launch, which the candidate cannot name, so the timed
stream is the stream the markers ran on.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

END_MARK_CYCLES = 1000  # the end marker: a sleep of ~0.5 us on the timed stream
CALLS = 3


@dataclass
class Record:
    """One piece of device work (kernel, copy, memset) from the trace, times in us."""

    stream: int
    start: float
    end: float
    kind: str = ""  # "start"/"end" (the markers), "flush" (the L2 flush), "" (the call's work)
    name: str = ""


@dataclass
class RangeFinding:
    """Per call: the call's device work, how much of it ran on other streams than the timed
    one, and how much of it ran outside the timed range (per stream)."""

    timed_stream: int | None = None
    kernel_us: float = 0.0
    other_streams_us: float = 0.0
    outside_us: float = 0.0
    outside_by_stream: dict[int, float] = field(default_factory=dict)
    problem: str = ""  # the trace could not place the timed range (nothing is decided then)

    def to_dict(self) -> dict[str, Any]:
        return {"timed_stream": self.timed_stream, "kernel_us": self.kernel_us,
                "other_streams_us": self.other_streams_us, "outside_us": self.outside_us,
                "outside_by_stream": {str(k): v for k, v in self.outside_by_stream.items()},
                "problem": self.problem}


def work_outside_range(records: Iterable[Record], calls: int) -> RangeFinding:
    """Where the call's device work ran relative to the timed ranges of `calls` profiled calls.

    A timed range runs from the end of a start marker to the start of the next end marker
    (both on the timed stream). Every record of the call's work (kind "") contributes its
    duration to `kernel_us`; a record on another stream also to `other_streams_us`, and the
    part of it outside every timed range to `outside_us` (work on the timed stream runs in
    stream order with the events: measured wherever it lies); all per call."""
    records = list(records)
    starts = sorted((r for r in records if r.kind == "start"), key=lambda r: r.start)
    ends = sorted((r for r in records if r.kind == "end"), key=lambda r: r.start)
    finding = RangeFinding()
    if len(starts) != calls or len(ends) != calls:
        finding.problem = (f"found {len(starts)} start and {len(ends)} end markers for {calls} calls "
                           "(the profiler did not link them to their launches?)")
        return finding
    streams = {r.stream for r in starts + ends}
    if len(streams) != 1:
        finding.problem = f"the markers ran on several streams {sorted(streams)}"
        return finding
    finding.timed_stream = streams.pop()
    windows = [(s.end, e.start) for s, e in zip(starts, ends, strict=True)]
    if any(lo > hi for lo, hi in windows) or any(windows[i][1] > windows[i + 1][0] for i in range(calls - 1)):
        finding.problem = "the markers are out of order"
        return finding
    for r in records:
        if r.kind:
            continue
        duration = max(0.0, r.end - r.start)
        finding.kernel_us += duration
        if r.stream == finding.timed_stream:  # in stream order with the events: measured
            continue
        finding.other_streams_us += duration
        inside = sum(max(0.0, min(r.end, hi) - max(r.start, lo)) for lo, hi in windows)
        outside = max(0.0, duration - inside)
        if outside > 0:
            finding.outside_us += outside
            finding.outside_by_stream[r.stream] = finding.outside_by_stream.get(r.stream, 0.0) + outside
    finding.kernel_us /= calls
    finding.other_streams_us /= calls
    finding.outside_us /= calls
    finding.outside_by_stream = {s: v / calls for s, v in finding.outside_by_stream.items()}
    return finding


def device_records(events: Iterable[Any], marks: dict[str, str]) -> list[Record]:
    """The device work of a kineto trace (`prof.profiler.kineto_results.events()`), each
    record tagged with the kind of the named profiler range (`marks`: range name -> kind)
    that its launch came from: the range itself or an op inside it on the same thread (the
    profiler links a kernel to the innermost op around its launch: aten::sum for the flush)."""
    from torch.autograd import DeviceType

    events = list(events)
    cpu = [e for e in events if e.device_type() == DeviceType.CPU]
    ranges = [(e.start_ns(), e.end_ns(), e.start_thread_id(), marks[e.name()]) for e in cpu if e.name() in marks]

    def kind_of(e: Any) -> str | None:
        for lo, hi, thread, kind in ranges:
            if lo <= e.start_ns() and e.end_ns() <= hi and e.start_thread_id() == thread:
                return kind
        return None

    # A kernel carries the correlation id of its launch (cudaLaunchKernel, cudaMemsetAsync: the
    # runtime's calls, named cu*), which lies inside the range it came from; torch 2.11 links
    # a kernel launched outside any ATen op (the markers' sleep) to nothing else. Older torch
    # linked kernels to their ATen op instead: that link is the fallback.
    launches, ops = {}, {}
    for e in cpu:
        kind = kind_of(e)
        if kind is not None:
            (launches if e.name().startswith("cu") else ops)[e.correlation_id()] = kind
    records = []
    for e in events:
        if e.device_type() != DeviceType.CUDA:
            continue
        activity = e.activity_type() if hasattr(e, "activity_type") else ""
        if "annotation" in str(activity) or e.name() in marks:  # a range's span on the GPU, not work
            continue
        kind = launches.get(e.correlation_id()) or ops.get(e.linked_correlation_id()) or ""
        records.append(Record(stream=int(e.device_resource_id()), start=e.start_ns() / 1e3, end=e.end_ns() / 1e3,
                              kind=kind, name=str(e.name())[:80]))
    return records


def profile_timed_range(clock: Any, fn: Callable[..., Any], inputs: list[Any], calls: int = CALLS) -> RangeFinding:
    """Profile `calls` calls of fn(*inputs) as `clock` (a CUDA timing.Clock) times them and
    say where their device work ran (work_outside_range)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from kcoder.evaluate.harness.timing import flush_l2

    token = secrets.token_hex(8)
    marks = {f"kcoder.flush.{token}": "flush", f"kcoder.start.{token}": "start", f"kcoder.end.{token}": "end"}
    names = {kind: name for name, kind in marks.items()}
    torch.cuda.synchronize()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            with record_function(names["flush"]):
                flush_l2(clock.flush_buffer)
            with record_function(names["start"]):
                clock.gpu_sleep(int(clock.cycles_per_s * clock.overlap_s))
            out = fn(*inputs)
            with record_function(names["end"]):
                clock.gpu_sleep(END_MARK_CYCLES)
            torch.cuda.synchronize()
            del out
    return work_outside_range(device_records(prof.profiler.kineto_results.events(), marks), calls)
