"""Paths in artifacts that leave the machine (committed reports, report.md/report.json): relative
to the repository, never the local absolute path (which names the user's home and folders).

`relative_paths` rewrites every string of a JSON-like value: a path under `base` becomes
relative to it, the home folder becomes `~`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def repo_top(path: Path) -> Path | None:
    """The top of the git work tree holding `path` (a .git folder or file found upward), or None."""
    path = Path(path).resolve()
    for folder in (path, *path.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _prefix(folder: str) -> re.Pattern[str]:
    # The folder as a whole path component: /tmp/proj must not match /tmp/project.
    return re.compile(r"(?<![\w.-])" + re.escape(folder.rstrip("/")) + r"(/|(?![\w.-]))")


def relative_paths(data: Any, base: Path) -> Any:
    """`data` with absolute paths under `base` made relative to it ("." for `base` itself) and
    the home folder written as "~"."""
    rules = [(_prefix(str(Path(base).resolve())), lambda m: "" if m.group(1) else ".")]
    home = str(Path.home())
    if home not in ("", "/"):
        rules.append((_prefix(home), lambda m: "~/" if m.group(1) else "~"))

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            for pattern, repl in rules:
                value = pattern.sub(repl, value)
            return value
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [fix(v) for v in value]
        return value

    return fix(data)
