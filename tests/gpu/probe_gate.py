"""The gate on this GPU (issue 40): a batch queued behind a gate page does not run until the
judge's side opens it, and reads the key written then. Prints GATE lines; exits 1 on failure.
Run on the GPU machine: python3 tests/gpu/probe_gate.py"""

import os
import sys
import time

import torch

from kcoder.evaluate.harness.batchrun import BatchRun, DeviceGate, perturbed
from kcoder.evaluate.judgeclock import GatePage


def main() -> int:
    import faulthandler

    faulthandler.dump_traceback_later(25, exit=True)  # a hang shows where it waits
    page = GatePage()
    gate = DeviceGate(torch, os.dup(page.fd))
    x = torch.randn(1 << 20, device="cuda")
    model = torch.nn.ReLU()
    run = BatchRun(torch, "cuda", model, [x], 8, keep=True)
    from kcoder.evaluate.harness.batchrun import warm_kernels

    warm_kernels(run)
    generation = page.next()
    print("GATE registered; pinned:", gate.host.is_pinned(), flush=True)
    key = gate.hold(generation)
    print("GATE held", flush=True)
    t0 = time.perf_counter()
    run.queue(key)
    queued_s = time.perf_counter() - t0
    print(f"GATE queued in {queued_s * 1e3:.2f} ms", flush=True)
    time.sleep(0.2)
    done_early = torch.cuda.current_stream().query()
    page.open(123456789, generation)
    t1 = time.perf_counter()
    sums = run.finish()
    ran_s = time.perf_counter() - t1
    want = perturbed(torch, [x], 123456789, 8, 5, "cuda")
    same = torch.equal(run.outputs[5], model(*want))
    from kcoder.evaluate.harness.batchrun import commitments

    committed = commitments(torch, run.outputs[5]) == sums[5]
    print(f"GATE queued in {queued_s * 1e3:.2f} ms; stream idle before opening: {done_early}; ran in "
          f"{ran_s * 1e3:.3f} ms after opening; call 5 replayed exactly: {same}; commitment matches: {committed}")
    ok = (not done_early) and same and committed
    print("GATE OK" if ok else "GATE FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
