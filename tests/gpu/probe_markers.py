"""Diagnose the timed-range markers on this torch (issue 40 item 8): profile calls as
timedrange.profile_timed_range does and print every event the trace holds, with the fields
device_records links markers by. Run on the GPU machine: python3 tests/gpu/probe_markers.py"""

import secrets

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from kcoder.evaluate.candidate.timedrange import device_records, profile_timed_range, work_outside_range
from kcoder.evaluate.harness.timing import Clock, flush_l2


def field(e, name):
    try:
        value = getattr(e, name)
        return value() if callable(value) else value
    except Exception as exc:  # noqa: BLE001 - a diagnostic prints what it cannot read
        return f"<{type(exc).__name__}>"


def main() -> None:
    print("torch", torch.__version__, torch.cuda.get_device_name())
    clock = Clock("cuda")
    x = torch.randn(1 << 20, device="cuda")
    fn = lambda t: t * 2.0  # noqa: E731
    token = secrets.token_hex(4)
    marks = {f"kcoder.flush.{token}": "flush", f"kcoder.start.{token}": "start", f"kcoder.end.{token}": "end"}
    names = {k: n for n, k in marks.items()}
    torch.cuda.synchronize()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(names["flush"]):
            flush_l2(clock.flush_buffer)
        with record_function(names["start"]):
            clock.gpu_sleep(1000)
        fn(x)
        with record_function(names["end"]):
            clock.gpu_sleep(1000)
        torch.cuda.synchronize()
    events = list(prof.profiler.kineto_results.events())
    print(f"{len(events)} events")
    for e in events:
        print(" | ".join(str(field(e, n))[:60] for n in ("name", "device_type", "activity_type", "correlation_id",
                                                          "linked_correlation_id", "start_thread_id",
                                                          "device_resource_id", "start_ns", "end_ns")))
    print("device_type CPU value", DeviceType.CPU, "CUDA", DeviceType.CUDA)
    records = device_records(events, marks)
    for r in records:
        print("RECORD", r)
    print("FINDING", work_outside_range(records, 1))
    print("PROFILE_TIMED_RANGE", profile_timed_range(clock, fn, [x]))
    print("KEYAVG", prof.key_averages().table(row_limit=12)[:3000])


if __name__ == "__main__":
    main()
