"""Notes a verdict carries about what the judge's checks saw, each said once.

Information for the person reading the verdict, never a finding against the candidate: which
tolerance rule accepted an output, that large outputs were checked only in part, that a
persisting-L2 carve-out was found (and reset) before a timed call.
"""

from __future__ import annotations

from typing import Any

from kcoder.verdict import Verdict


class VerdictNotes:
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.float64_accepted = 0  # checked outputs the float64 rule accepted (compare64.py)
        self.float64_note, self.float64_first = 0, ""  # the note's index; the first such output

    def rule(self, rule: str, label: str) -> None:
        """Say which rule accepted an output when the float32 tolerance alone did not: the
        first such output's figures, and how many there were."""
        if not rule:
            return
        notes = self.verdict.notes
        if not self.float64_accepted:
            self.float64_first = f"{label}: {rule}"
            notes.append("")
            self.float64_note = len(notes) - 1
        self.float64_accepted += 1
        n = self.float64_accepted
        notes[self.float64_note] = (f"tolerance: the float64 rule accepted {n} checked output{'s' if n > 1 else ''} "
                                    f"that the float32 tolerance refused; first {self.float64_first}")[:900]

    def rationed(self, budget_mb: float) -> None:
        self._once(f"outputs are large: during timing only some outputs were checked "
                   f"(a budget of {budget_mb / 1024:.0f} GiB of checked outputs)")

    def carveout(self, carveout: Any) -> None:
        # A library may set one by itself (cuDNN does): information, never held against the
        # candidate; the reset gives every timed call, eager's alike, a plain L2.
        if isinstance(carveout, int) and carveout > 0:
            self._once("persisting-L2 carve-out found set before a timed call (by the candidate or a library it "
                       "calls); it was reset before every timed call, as before eager's, and is not held against it")

    def _once(self, note: str) -> None:
        if note not in self.verdict.notes:
            self.verdict.notes.append(note)
