"""Baselines measured once: a problem's eager and torch.compile times and its speed of light,
kept per (problem, device, torch version, precision, options that change them) and reused by
every later evaluation of that problem: tune points, suite retries, an agent's turns.

Only the judge reads and writes this cache, and only with figures its reference process
measured (a candidate never runs there). It lives in kcoder's cache dir under `baselines/`,
which the bwrap sandbox mounts read-only for the candidate (sandbox.py), so a candidate cannot
plant slow baselines for its next evaluation; with `--sandbox none` the candidate runs as the
user and nothing on disk is out of its reach (set KCODER_FRESH_BASELINES=1 to time them
afresh every time; such measurements are still kept for later evaluations). What a cached
figure cannot give is fresh noise: a verdict whose speed-up interval still straddles the
reward's margin times the baselines again (basetimer.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.timings import Timings
from kcoder.paths import cache_root
from kcoder.verdict import SPEEDUP_MARGIN

# 2: the SOL figures carry the physical floor (floor.py); 3: every figure by the judge's clock (judgeclock.py);
# 4: the batches' calibration (measured in the reference process alone) is kept with them
FORMAT = 7  # 5: cpu batches in arenas (arenaclock.py): calibrations and figures of 4 do not apply (cpu)
# 6, 7: the timed processes' heap maps nothing on its own (harness/timing.py ALLOCATOR_ENV)
MAX_AGE_S = 24 * 3600.0  # clocks, drivers and thermal state drift: measure again after a day
FRESH_ENV = "KCODER_FRESH_BASELINES"
# Environment that changes what torch.compile produces or how torch runs (by prefix).
_ENV_PREFIXES = ("TORCHINDUCTOR_", "TORCH_COMPILE", "TORCHDYNAMO_", "CUBLAS_", "CUDA_VISIBLE_DEVICES",
                 "OMP_NUM_THREADS", "NVIDIA_TF32_OVERRIDE")


def cache_dir() -> Path:
    return cache_root() / "baselines"


def reuse_enabled() -> bool:
    return os.environ.get(FRESH_ENV, "") not in ("1", "true", "yes")


def baseline_key(problem_sha256: str, device_name: str, torch_version: str, options: EvalOptions) -> dict[str, Any]:
    """Everything the baselines and the SOL depend on. The candidate's options (allow, build
    form, audits) are not here: they change nothing the reference process measures."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}
    return {"format": FORMAT, "problem": problem_sha256, "device": options.device, "device_name": device_name,
            "torch": torch_version, "precision": options.precision, "compile": options.compile_baseline,
            "seed": options.seed, "env": env}


def _path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cache_dir() / f"{digest}.json"


def load_baselines(key: dict[str, Any], now: float | None = None) -> dict[str, Any] | None:
    """The cached entry for `key` ({"samples", "sol", "measured_at"}), or None when there is
    none, it is older than MAX_AGE_S, or anything in it is not what `save_baselines` wrote."""
    try:
        entry = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    stamp = entry.get("stamp")
    now = time.time() if now is None else now
    if not isinstance(stamp, (int, float)) or not 0 <= now - stamp <= MAX_AGE_S:
        return None
    samples, sol = entry.get("samples"), entry.get("sol")
    wanted = {"eager", "compile"} if key["compile"] else {"eager"}
    if not isinstance(samples, dict) or set(samples) != wanted or not isinstance(sol, dict):
        return None
    if not all(_valid_times(v) for v in samples.values()):
        return None
    return {"samples": samples, "sol": sol, "measured_at": str(entry.get("measured_at", ""))}


def save_baselines(key: dict[str, Any], samples: dict[str, list[float]], sol: dict[str, Any]) -> None:
    """Keep freshly measured baselines (atomic replace; a failure to write costs only reuse)."""
    path = _path(key)
    entry = {"key": key, "stamp": time.time(), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
             "samples": {k: list(map(float, v)) for k, v in samples.items()}, "sol": sol}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, path)
    except OSError:
        pass


def _valid_times(values: Any) -> bool:
    return (isinstance(values, list) and len(values) >= 2 and
            all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in values))


def undecided(baselines: dict[str, list[float]], candidate: list[float]) -> list[str]:
    """The baselines whose speed-up interval against `candidate` contains the reward's margin
    (the reward could go either way): their times are worth measuring again."""
    timings = Timings({**baselines, "candidate": candidate})
    close = []
    for name in baselines:
        low, high = timings.speedup_ci(name, "candidate")
        if low <= SPEEDUP_MARGIN <= high:
            close.append(name)
    return close
