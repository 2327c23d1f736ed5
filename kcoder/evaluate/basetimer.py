"""The baselines of one evaluation, for the judge: reused from the cache (basecache.py) or
timed by the reference process in two halves around the candidate's timing, with the speed
of light measured after the first half (while no candidate process is alive).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from kcoder.evaluate import basecache


class Baselines:
    """Asks through the judge (its reference process, its seeds, its stage clock)."""

    def __init__(self, judge: Any) -> None:
        self.judge = judge
        self.key = self._key()
        # KCODER_FRESH_BASELINES: time them afresh (and keep that measurement for later ones)
        self.cached = basecache.load_baselines(self.key) if basecache.reuse_enabled() else None
        self.before: dict[str, list[float]] = {}
        self.sol: dict[str, Any] = {}
        # What every batch of this problem costs besides the implementation (judgeclock.Calibration),
        # measured with the baselines, while no candidate process is alive, and cached with them.
        self.calibration: Any = None
        if self.cached:
            from kcoder.evaluate.judgeclock import Calibration

            self.calibration = Calibration.from_value(self.cached["sol"].get("calibration"))
            if self.calibration is None:
                self.cached = None  # an entry without it is measured again

    def _key(self) -> dict[str, Any]:
        j = self.judge
        digest = hashlib.sha256(j.problem.read_text(encoding="utf-8").encode()).hexdigest()  # = Problem.sha256
        return basecache.baseline_key(digest, j.verdict.device_name, j.verdict.torch_version, j.options)

    def first(self, deadline: float) -> dict[str, Any]:
        """Before the candidate's timing: the cached figures, or the first half of the rounds
        and the SOL. Returns the SOL figures."""
        if self.cached:
            self.before, self.sol = self.cached["samples"], self.cached["sol"]
            self.judge.verdict.notes.append(f"baselines and speed of light reused, measured "
                                            f"{self.cached['measured_at']} (same problem, device, torch, precision)")
            self.judge.stages.add("baselines_cached", 0.001)
            return self.sol
        self.before = self.measure(deadline)
        # After the baselines: the first time on a node this measures the device's ceilings
        # (GiB-sized copies, matmuls), which must not run just before a baseline is timed.
        self.sol = {**self.judge.ask_reference(_left(deadline), "timing", op="sol"), **self.sol}
        return self.sol

    def last(self, deadline: float, candidate: list[float]) -> dict[str, list[float]]:
        """After the candidate's process ended: every baseline's samples. Cached ones stand
        unless the reward could go either way; then both halves are timed afresh."""
        if self.cached and not basecache.undecided(self.before, candidate):
            return dict(self.before)
        if self.cached:  # no close verdict rests on an earlier evaluation's noise alone
            self.judge.verdict.notes.append("the speed-up is close to the reward's margin: baselines timed again")
            self.before = self.measure(deadline)
        after = self.measure(deadline)
        samples = {k: self.before[k] + after[k] for k in self.before}
        if "sol_error" not in self.sol:
            basecache.save_baselines(self.key, samples, self.sol)
        return samples

    def measure(self, deadline: float) -> dict[str, list[float]]:
        """Half of the baselines' samples: eager and torch.compile in the reference process,
        timed by the judge's clock exactly as the candidate is (judgetiming.py)."""
        from kcoder.evaluate.judgeclock import SAMPLES

        samples, self.calibration = self.judge.time_baselines(deadline, SAMPLES // 2 + 1, self.calibration)
        if self.calibration is not None:
            self.sol["calibration"] = self.calibration.to_list()  # cached with the baselines
        return samples


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
