"""Accepting a candidate for /commit: only bytes the evaluator verified, exactly as verified.

An accepted candidate is pinned to its snapshot under candidates/ (kcoder's own folder: the
agent's file tools cannot write there) and to that snapshot's sha256, checked again at
commit time, so what lands in git is byte for byte what passed verification.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kcoder.agent.loop import rank
from kcoder.verdict import Verdict
from kcoder.workspace import CANDIDATES_DIR, Workspace


class NotVerified(Exception):
    """The file has no passing verdict for its current content."""


@dataclass
class Accepted:
    """The candidate /commit will commit."""

    path: Path  # the snapshot the evaluator judged
    sha256: str
    verdict: Verdict

    def unchanged(self) -> bool:
        """The snapshot still holds the bytes that were accepted."""
        return self.path.is_file() and _sha256(self.path) == self.sha256


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verified(ws: Workspace, path: Path) -> tuple[Path, Verdict] | None:
    """(snapshot, verdict) of the best passing verdict recorded for exactly `path`'s bytes."""
    data = path.read_bytes()
    snapshots = {ws.relative(p): p for p in sorted((ws.root / CANDIDATES_DIR).glob("model_new_*.py"))
                 if p.read_bytes() == data}
    found = [(Verdict.from_dict(r["verdict"]), r["candidate"]) for r in ws.read_trajectory()
             if r.get("type") == "verdict" and r.get("candidate") in snapshots
             and (r.get("verdict") or {}).get("correct")]
    if not found:
        return None
    # A timed verdict first (its speed-ups go into the commit message), then the fastest.
    verdict, rel = max(found, key=lambda vr: rank(vr[0]))
    return snapshots[rel], verdict


def accept(ws: Workspace, path: Path, label: str) -> Accepted:
    """Accept `path` if the evaluator verified exactly its current content; else NotVerified."""
    if not path.is_file():
        raise NotVerified(f"{label} does not exist yet, so there is nothing to accept")
    hit = verified(ws, path)
    if hit is None:
        raise NotVerified(f"{label} has not passed verification as it is now, so it cannot be "
                          "accepted: /eval it first (only verified candidates are committed)")
    snapshot, verdict = hit
    return Accepted(snapshot, _sha256(snapshot), verdict)
