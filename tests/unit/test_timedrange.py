"""Work outside the timed range (timedrange.py), decided from profiler records on the CPU:
a library's overlapping kernels and its own joined streams are accepted, work on a side
stream before the start event or after the end event is refused."""

import pytest
from torch.autograd import DeviceType

from kcoder.evaluate.candidate.timedrange import Record, device_records, work_outside_range
from kcoder.evaluate.judgetiming import judge_range

TIMED, SIDE, LIBRARY = 7, 23, 31


def _calls(body, calls=3, period=1000.0, head=50.0, call_us=100.0):
    """Records of `calls` profiled calls: flush, start marker (the head start), the call's
    work from body(t0) (t0 = the start event's time), end marker at t0 + call_us."""
    records = []
    for i in range(calls):
        t = i * period
        records += [Record(TIMED, t, t + 20, "flush"), Record(TIMED, t + 20, t + 20 + head, "start")]
        t0 = t + 20 + head
        records += body(t0)
        records.append(Record(TIMED, t0 + call_us + 2, t0 + call_us + 3, "end"))
    return records


def test_library_kernels_that_overlap_inside_the_range_are_accepted():
    # cuDNN-like: kernels on the timed stream that overlap each other (programmatic dependent
    # launch) and on an internal stream joined back before the end: 180 us of kernels in 100 us
    found = work_outside_range(_calls(lambda t0: [Record(TIMED, t0, t0 + 60), Record(TIMED, t0 + 40, t0 + 100),
                                                  Record(LIBRARY, t0 + 5, t0 + 65)]), 3)
    assert found.timed_stream == TIMED and found.problem == ""
    assert found.kernel_us == pytest.approx(180.0) and found.other_streams_us == pytest.approx(60.0)
    assert found.outside_us == 0.0
    note, failure = judge_range(found.to_dict(), event_us=100.0)
    assert failure == "" and "180.0 us" in note and "60.0 us of it on other streams" in note


def test_the_issues_transposed_convolution_figures_are_accepted():
    # issue 36: 18903.6 us of kernels per call, the timed stream saw 13562.5 us
    def conv(t0):
        return [Record(TIMED, t0, t0 + 13500), Record(LIBRARY, t0 + 100, t0 + 5503.6)]

    found = work_outside_range(_calls(conv, period=20000.0, call_us=13560.0), 3)
    assert found.kernel_us == pytest.approx(18903.6)
    assert judge_range(found.to_dict(), event_us=13562.5)[1] == ""


def test_side_stream_work_after_the_end_event_is_refused():
    # the hidden-stream exploit: nothing on the timed stream, a slow kernel on its own stream
    found = work_outside_range(_calls(lambda t0: [Record(SIDE, t0 + 1, t0 + 800)], call_us=2.0), 3)
    assert found.outside_by_stream == {SIDE: pytest.approx(796.0)}  # the range ends at t0 + 4
    note, failure = judge_range(found.to_dict(), event_us=3.0)
    assert "outside the timed stream" in failure and f"stream {SIDE}" in failure and f"timed stream {TIMED}" in failure


def test_side_stream_work_during_the_head_start_is_refused():
    # launched at once, it runs while the timed stream still sleeps: before the start event
    found = work_outside_range(_calls(lambda t0: [Record(SIDE, t0 - 45, t0 + 5), Record(TIMED, t0 + 5, t0 + 10)],
                                      call_us=10.0), 3)
    assert found.outside_us == pytest.approx(45.0)
    assert judge_range(found.to_dict(), event_us=10.0)[1]


def test_small_timestamp_jitter_is_not_an_accusation():
    found = work_outside_range(_calls(lambda t0: [Record(LIBRARY, t0 + 10, t0 + 105)], call_us=100.0), 3)
    assert 0 < found.outside_us < 5
    assert judge_range(found.to_dict(), event_us=100.0)[1] == ""


def test_unplaceable_traces_decide_nothing_and_malformed_ones_are_refused():
    found = work_outside_range([Record(SIDE, 0, 1e6)], 3)  # no markers: the profiler linked nothing
    assert "markers" in found.problem
    note, failure = judge_range(found.to_dict(), event_us=1.0)
    assert failure == "" and "judge's own clock only" in note
    with pytest.raises(ValueError):
        judge_range({"kernel_us": "x", "other_streams_us": 0, "outside_us": 0}, 1.0)
    with pytest.raises(ValueError):
        judge_range(None, 1.0)


class _Event:
    """A kineto event as device_records reads it."""

    def __init__(self, name, device, start, end, corr=0, linked=0, stream=0, thread=1, activity=""):
        self._v = dict(name=name, device=device, start=start, end=end, corr=corr, linked=linked, stream=stream,
                       thread=thread, activity=activity)

    def name(self): return self._v["name"]
    def device_type(self): return self._v["device"]
    def start_ns(self): return self._v["start"]
    def end_ns(self): return self._v["end"]
    def correlation_id(self): return self._v["corr"]
    def linked_correlation_id(self): return self._v["linked"]
    def device_resource_id(self): return self._v["stream"]
    def start_thread_id(self): return self._v["thread"]
    def activity_type(self): return self._v["activity"]


def test_device_records_tag_kernels_by_the_range_around_their_launch():
    cpu, gpu = DeviceType.CPU, DeviceType.CUDA
    marks = {"kcoder.flush.t": "flush", "kcoder.start.t": "start"}
    events = [
        _Event("kcoder.flush.t", cpu, 0, 100, corr=1),
        _Event("aten::sum", cpu, 10, 90, corr=2),  # the flush's op: its kernel links to it
        _Event("kcoder.start.t", cpu, 100, 200, corr=3),
        _Event("aten::conv", cpu, 300, 400, corr=4),
        _Event("aten::helper", cpu, 20, 30, corr=5, thread=2),  # another thread: not the flush's
        _Event("reduce_kernel", gpu, 1000, 3000, linked=2, stream=TIMED),
        _Event("spin_kernel", gpu, 3000, 53000, linked=3, stream=TIMED),
        _Event("conv_kernel", gpu, 53000, 60000, linked=4, stream=LIBRARY),
        _Event("side_kernel", gpu, 53000, 60000, linked=5, stream=SIDE),
        _Event("kcoder.start.t", gpu, 3000, 53000, stream=TIMED, activity="gpu_user_annotation"),
    ]
    records = device_records(events, marks)
    assert [(r.name, r.kind, r.stream) for r in records] == [
        ("reduce_kernel", "flush", TIMED), ("spin_kernel", "start", TIMED), ("conv_kernel", "", LIBRARY),
        ("side_kernel", "", SIDE)]
    assert records[1].start == 3.0 and records[1].end == 53.0  # microseconds


def test_device_records_follow_the_launch_on_torch_2_11():
    """torch 2.11 (seen on an H100): a kernel's own correlation id is its launch's (cudaLaunchKernel),
    the marker's sleep kernel is linked to no op (0), and runtime ids collide with op ids (a
    cudaStreamIsCapturing inside the flush range shares id 6 with the call's aten::mul)."""
    cpu, gpu = DeviceType.CPU, DeviceType.CUDA
    marks = {"kcoder.flush.t": "flush", "kcoder.start.t": "start", "kcoder.end.t": "end"}
    events = [
        _Event("kcoder.flush.t", cpu, 0, 100, corr=1),
        _Event("aten::sum", cpu, 10, 90, corr=3),
        _Event("cudaStreamIsCapturing", cpu, 15, 16, corr=6),
        _Event("cudaLaunchKernel", cpu, 20, 80, corr=21),
        _Event("kcoder.start.t", cpu, 100, 200, corr=5),
        _Event("cudaLaunchKernel", cpu, 120, 180, corr=29),
        _Event("aten::mul", cpu, 210, 290, corr=6),
        _Event("cudaLaunchKernel", cpu, 220, 280, corr=40),
        _Event("kcoder.end.t", cpu, 300, 400, corr=7),
        _Event("cudaLaunchKernel", cpu, 320, 380, corr=46),
        _Event("reduce_kernel", gpu, 1000, 3000, corr=21, linked=3, stream=TIMED),
        _Event("spin_kernel", gpu, 3000, 53000, corr=29, linked=0, stream=TIMED),
        _Event("mul_kernel", gpu, 53000, 60000, corr=40, linked=6, stream=TIMED),
        _Event("spin_kernel", gpu, 60000, 61000, corr=46, linked=0, stream=TIMED),
    ]
    records = device_records(events, marks)
    assert [(r.name, r.kind) for r in records] == [
        ("reduce_kernel", "flush"), ("spin_kernel", "start"), ("mul_kernel", ""), ("spin_kernel", "end")]
    finding = work_outside_range(records, 1)
    assert not finding.problem and finding.timed_stream == TIMED and finding.kernel_us == 7.0
