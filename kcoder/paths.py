"""Where kcoder keeps things: the build/measurement cache, the per-user folder, run dirs.

Nothing here creates a folder: callers create what they write into (no work at import).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Root of kcoder's caches: $KCODER_CACHE, else ~/.cache/kcoder."""
    env = os.environ.get("KCODER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kcoder"


def kcoder_home() -> Path:
    """kcoder's per-user folder: $KCODER_HOME, else ~/.kcoder."""
    env = os.environ.get("KCODER_HOME")
    return Path(env).expanduser() if env else Path.home() / ".kcoder"


def runs_root(problem: Path) -> Path:
    """Default folder of a problem's run directories: .kcoder/runs beside the problem file."""
    return problem.resolve().parent / ".kcoder" / "runs"


def package_root() -> Path:
    """The folder that holds the `kcoder` package (put on a child's PYTHONPATH)."""
    return Path(__file__).resolve().parents[1]
