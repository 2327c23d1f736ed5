"""The judge's side of weights it draws (issue 45 item 5; reference/drawweights.py): after the
input sets with Model's own parameters and buffers, more input sets with a draw of them loaded
into both implementations, then Model's own loaded again (the timing and the baselines use them).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

DRAWN_SETS = 2


def verify_with_drawn_weights(judge: Any, deadline: float) -> None:
    """Fails the verdict (judge.fail) when the candidate is wrong with the judge's draw."""
    left = lambda: max(0.0, deadline - time.monotonic())  # noqa: E731
    path = judge.children.handoff / f"weights-drawn-{secrets.token_hex(6)}.pt"
    drawn = judge.ask_reference(left(), "verify", op="draw_weights", seed=judge.seed(), path=str(path)).get("drawn")
    if not drawn:
        return
    loaded = judge.ask_candidate(left(), "verify", "loaded", op="load_weights", path=str(path))
    missing = loaded.get("missing") if isinstance(loaded.get("missing"), list) else []
    if missing:  # its own names, or none: the draw cannot reach these (a wrong answer below says why)
        judge.verdict.notes.append("the judge's draw of parameters and buffers found no place in ModelNew for "
                                   + ", ".join(str(m)[:60] for m in missing[:6]) + " (copied by name and shape)")
    for i in range(DRAWN_SETS):
        judge.checked_call("verify", f"input set {i + 1} of {DRAWN_SETS} with parameters and buffers the judge "
                                     "drew", deadline)
    judge.verdict.notes.append(f"right with parameters and buffers the judge drew ({drawn} tensors redrawn, "
                               f"{DRAWN_SETS} input sets), not only with Model's initial ones")
    judge.ask_reference(left(), "verify", op="restore_weights")
    judge.ask_candidate(left(), "verify", "loaded", op="load_weights", path=str(judge.children.handoff / "weights.pt"))
    path.unlink(missing_ok=True)
