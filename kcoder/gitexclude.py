"""Keep kcoder's own folders out of the user's `git status`.

A run directory (`.kcoder/runs/...` beside the problem) is kcoder's record, not the user's
work, so `git status` should not list it. Tracked files (such as a .gitignore) are never
edited for this: the folder goes into the repository's own `.git/info/exclude`, which git
reads like a .gitignore that is not part of the repository (worktrees share their main
repository's).
"""

from __future__ import annotations

import re
from pathlib import Path

from kcoder.procs import run

HEADER = "# kcoder's run directories (added by kcoder; git status does not list them)"
_GIT_S = 10.0


def _git(cwd: Path, *args: str) -> str | None:
    result = run(["git", "-C", str(cwd), *args], _GIT_S, cwd)
    return result.output if result.rc == 0 else None


def _pattern(rel: str) -> str:
    """An anchored exclude pattern for the folder `rel`, with gitignore's special characters escaped."""
    return "/" + re.sub(r"([*?\[\]\\!#])", r"\\\1", rel) + "/"


def exclude_from_git(folder: Path) -> Path | None:
    """Add the existing `folder` to its repository's info/exclude unless git already ignores
    it; returns the exclude file when it was written. Outside a repository, without git, or
    for the work tree's top itself, nothing happens."""
    folder = folder.resolve()
    out = _git(folder, "rev-parse", "--show-toplevel", "--git-path", "info/exclude")
    lines = (out or "").splitlines()
    if len(lines) != 2:
        return None
    top, exclude = Path(lines[0]).resolve(), folder / lines[1]  # --git-path may be relative to cwd
    if folder == top or top not in folder.parents:
        return None
    rel = folder.relative_to(top).as_posix()
    if _git(top, "check-ignore", "-q", "--no-index", "--", rel) is not None:
        return None  # already ignored: by the user's .gitignore, or by an earlier run
    exclude = exclude.resolve()
    try:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        lead = "" if not text or text.endswith("\n") else "\n"
        header = "" if HEADER in text else HEADER + "\n"
        with exclude.open("a", encoding="utf-8") as fh:
            fh.write(f"{lead}{header}{_pattern(rel)}\n")
    except OSError:
        return None  # a read-only repository: the folder shows in git status, nothing worse
    return exclude
