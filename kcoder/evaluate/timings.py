"""The judge's statistics of timed samples: medians, spreads and speed-ups with a bootstrap
interval. Samples come from the judge's own clock (judgeclock.py), never from a process's report.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field


@dataclass
class Timings:
    """Per-implementation times in microseconds, one per round (same order across impls)."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def iqr(self, name: str) -> float:
        values = sorted(self.samples[name])
        if len(values) < 4:
            return values[-1] - values[0]
        q = statistics.quantiles(values, n=4)
        return q[2] - q[0]

    def speedup(self, base: str, cand: str) -> float:
        return self.median(base) / self.median(cand)

    def speedup_ci(self, base: str, cand: str, level: float = 0.90, n_boot: int = 400) -> list[float]:
        """Bootstrap interval of the ratio of medians, resampling each side's rounds (the
        baselines and the candidate are timed in different processes, so rounds are unpaired)."""
        rng = random.Random(1234)
        a, b = self.samples[base], self.samples[cand]
        ratios = []
        for _ in range(n_boot):
            ra = [a[rng.randrange(len(a))] for _ in a]
            rb = [b[rng.randrange(len(b))] for _ in b]
            ratios.append(statistics.median(ra) / statistics.median(rb))
        ratios.sort()
        lo = ratios[int((1 - level) / 2 * n_boot)]
        hi = ratios[int((1 + level) / 2 * n_boot) - 1]
        return [round(lo, 4), round(hi, 4)]
