"""The device's ceilings for the profiler, measured in a process of kcoder's own.

    python -m kcoder.profile.calibrate OUT.json

The ceilings are cached for the judge's speed of light as well (device_limits.py), so they are
measured only where no candidate's code was ever loaded: here (and in the reference process),
never in the profile target, which imports the candidate.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kcoder.procs import child_env, run


def measure() -> dict[str, Any]:
    """{"limits": ..., "measured": bool} of the first CUDA device, or {} without one."""
    import torch

    from kcoder.device_limits import limits_for

    if not torch.cuda.is_available():
        return {}
    started = time.perf_counter()
    limits, measured = limits_for(torch, "cuda")
    return {"limits": asdict(limits), "measured": measured, "seconds": round(time.perf_counter() - started, 1)}


def calibrate(folder: Path, timeout_s: float) -> tuple[dict[str, Any], str | None]:
    """Run this module in a child process (kcoder's code only); the result and a note."""
    out = folder / "calibrate.json"
    res = run([sys.executable, "-m", "kcoder.profile.calibrate", str(out)], timeout_s, folder, child_env())
    try:
        result = json.loads(out.read_text())
    except (OSError, ValueError):
        tail = (res.output.strip().splitlines() or ["no output"])[-1][:200]
        return {}, f"device ceilings not measured: {tail}"
    note = f"measured device ceilings in {result['seconds']} s (cached)" if result.get("measured") else None
    return result, note


def main() -> None:
    result = measure()
    out = Path(sys.argv[1])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
