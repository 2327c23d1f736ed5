"""What one output's trip from the candidate's process to the reference process costs: through a
file (torch.save into /dev/shm, torch.load; the path before issue 36, still the fallback) against
by descriptor (evaluate/outbox.py -> a Unix socket -> handoff.receive_output: a memfd on the CPU,
an exported CUDA allocation copied device to device on the GPU), for outputs of several sizes.

The sending side is a process of its own, as the candidate's is; the time is the reader's wall
clock from its request to its own copy of the output (synchronized on the GPU), median of
--repeat trips. Peak device memory of both processes is printed on the GPU.

    python bench/handoff.py --device cuda --sizes-mb 1,256,6144
    python bench/handoff.py --device cpu --sizes-mb 1,64,256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SENDER = """
import json, os, sys
import torch
from kcoder.evaluate.candidate.outbox import Outbox
fd, device, mb, folder = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
outbox = Outbox(fd, device)
out = torch.randn(int(mb * 2**20 / 4), device=device)
for line in sys.stdin:
    mode, path = line.split()
    if mode == "file":
        outbox.broken = "asked for a file"
    reply = outbox.deliver(out, path)
    outbox.broken = ""
    peak = torch.cuda.max_memory_allocated() + outbox.shared_bytes() if device == "cuda" else 0
    print(json.dumps({**reply, "peak": peak}), flush=True)
"""


def trips(device: str, mb: float, repeat: int) -> dict[str, float]:
    import torch

    from kcoder.evaluate.harness import handoff

    mine, theirs = handoff.socket_pair()
    relay, reader = handoff.socket_pair()
    folder = Path(tempfile.mkdtemp(prefix="kcoder-handoff-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    proc = subprocess.Popen([sys.executable, "-c", SENDER, str(theirs.fileno()), device, str(mb), str(folder)],
                            pass_fds=[theirs.fileno()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    theirs.close()
    ref_bytes = int(mb * 2**20 / 4) * 4
    times: dict[str, list[float]] = {"file": [], "descriptor": []}
    peak = 0
    try:
        for i in range(repeat + 1):  # the first trip of each kind warms up (allocations, the driver)
            for mode in ("file", "descriptor"):
                path = folder / f"out-{i}.pt"
                started = time.perf_counter()
                proc.stdin.write(f"{mode} {path}\n")
                proc.stdin.flush()
                reply = json.loads(proc.stdout.readline())
                if "shared" in reply:
                    handoff.validate(reply["shared"], handoff.bytes_bound(ref_bytes))
                    fd = handoff.receive_fd(mine)  # the judge's relay (here in the reader's process)
                    handoff.send_fd(relay, fd)
                    os.close(fd)
                    out = handoff.receive_output(reader, reply["shared"], ref_bytes, device)
                else:
                    out = torch.load(path, weights_only=True, map_location=device)
                    path.unlink()
                if device == "cuda":
                    torch.cuda.synchronize()
                if i:
                    times["descriptor" if "shared" in reply else "file"].append(time.perf_counter() - started)
                peak = max(peak, reply["peak"])
                del out
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        for sock in (mine, relay, reader):
            sock.close()
        folder.rmdir()
    result = {k: statistics.median(v) for k, v in times.items() if v}
    if device == "cuda":
        result["peak_gb"] = (peak + torch.cuda.max_memory_allocated()) / 2**30
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--sizes-mb", default="1,64,256")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'output MB':>10} {'file s':>9} {'descriptor s':>13} {'speed-up':>9}" +
          (f" {'peak GB (both)':>15}" if args.device == "cuda" else ""), flush=True)
    for mb in (float(s) for s in args.sizes_mb.split(",") if s):
        r = trips(args.device, mb, args.repeat)
        line = f"{mb:10.0f} {r['file']:9.4f} {r['descriptor']:13.4f} {r['file'] / r['descriptor']:8.1f}x"
        if "peak_gb" in r:
            line += f" {r['peak_gb']:15.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
