"""What an evaluation is doing right now, in words, for a live status line.

The judge's conversation with its two child processes already says where an evaluation is:
the candidate's process announces its build phases (import, compile, init), and every request
names its operation (verify with an input-set label, time, batch ...). `StageReporter` turns
those messages into short texts ("verifying input set 2 of 5", "timing round 7") and passes
them to the caller's `on_stage(text)`; it only reads messages the judge sends or has already
validated, so it changes nothing about how a verdict is decided.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

StageCallback = Callable[[str], None]

_PHASES = {"import": "building: importing the candidate", "compile": "building: compiling (load_inline)",
           "init": "building: ModelNew(...)"}
_CANDIDATE_OPS = {"warmup": "timing: warm-up calls", "batch": "timing: batches by the judge's clock",
                  "kernel_time": "timing: profiler cross-check", "peak": "timing: peak memory",
                  "finish": "finishing the precompiled header build"}
# inline.describe(): "extension NAME: cached|built in S s (MODE build[: NOTES])"
_BUILD_RECORD = re.compile(r"^extension (\S+): (cached|built) in ([\d.]+) s \((\w+) build")


def build_note(notes: list[str]) -> str:
    """The candidate's build in a few words, from a verdict's or a build reply's notes:
    "cached build", "built in 8.4 s (fast build)"; "" when no build is recorded."""
    parts = []
    for note in notes:
        match = _BUILD_RECORD.match(str(note))
        if not match:
            continue
        _, state, seconds, mode = match.groups()
        if state == "cached":
            parts.append("cached build")
        else:
            parts.append(f"built in {float(seconds):.1f} s" + (" (fast build)" if mode != "plain" else ""))
    return ", ".join(parts)


class StageReporter:
    """Feeds `on_stage` from the judge's messages (see the module docstring). One per
    evaluation; `builds` counts candidate starts (the first is the build, later ones restart
    the cached build for timing)."""

    def __init__(self, on_stage: StageCallback | None) -> None:
        self.on_stage = on_stage
        self.builds = 0
        self.rounds = 0
        self.note = ""  # how the candidate was built, kept beside every later stage

    def _say(self, text: str) -> None:
        if self.on_stage is not None:
            self.on_stage(f"{text} · {self.note}" if self.note else text)

    def reference_started(self) -> None:
        self._say("loading the problem (reference process)")

    def candidate_started(self) -> None:
        self.builds += 1
        self._say("building" if self.builds == 1 else "restarting the candidate for timing")

    def candidate_message(self, message: dict[str, Any]) -> None:
        """A message to or from the candidate's process (a request, a phase or a reply)."""
        if "phase" in message and self.builds == 1:
            self._say(_PHASES.get(str(message["phase"]), "building"))
        elif message.get("built") is True and isinstance(message.get("notes"), list):
            self.note = self.note or build_note(message["notes"])
            self._say("built")
        elif message.get("op") == "verify" and message.get("label"):  # during timing: an audit call
            self._say(f"timing: checking the {message['label']}" if self.rounds else f"verifying {message['label']}")
        elif message.get("op") == "time":
            self.rounds += 1
            self._say(f"timing round {self.rounds}")
        elif message.get("op") in _CANDIDATE_OPS:
            self._say(_CANDIDATE_OPS[message["op"]])

    def reference_message(self, message: dict[str, Any]) -> None:
        """A request to the reference process: its baseline timing and SOL are stages of their own."""
        if message.get("op") == "batch" and not message.get("calibration"):
            self._say(f"timing {message.get('impl') or 'the baseline'} by the judge's clock")
        elif message.get("op") == "baselines":
            self._say("timing the baselines (eager, torch.compile)")
        elif message.get("op") == "sol":  # the first time on a device, its ceilings are measured
            self._say("counting the reference's work (speed of light)")
