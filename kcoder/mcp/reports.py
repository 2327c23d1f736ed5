"""The MCP resources: the reports of run directories (`.kcoder/runs/<run>/`) under the server's
root, so a calling agent can read what an optimize or tune run concluded.

A run is named by its folder name (`<problem>-<stamp>`, `tune-<candidate>-<stamp>`). Run
folders are found in `.kcoder/runs` beside the problems the server was asked about and by a
shallow walk of the root; nothing outside the root is ever listed or read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# What a run leaves for people: optimize's report, tune's table.
REPORT_FILES = ("report.md", "report.json", "table.md", "table.json")
SCAN_DEPTH = 4  # root/examples/<name>/.kcoder/runs is depth 3 below the root
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


class RunIndex:
    """The run directories a server may show, by name."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.known: set[Path] = set()  # runs folders of problems seen by the tools

    def remember(self, problem: Path) -> None:
        """Note the runs folder beside `problem` (a tool was asked about it)."""
        self.known.add(problem.resolve().parent / ".kcoder" / "runs")

    def runs(self) -> dict[str, Path]:
        """Run name -> folder, for every run that has a report, newest last."""
        found: dict[str, Path] = {}
        for base in sorted(self.known | set(self._scan())):
            if not base.is_dir() or not base.resolve().is_relative_to(self.root):
                continue
            for run in sorted(base.iterdir(), key=lambda p: p.stat().st_mtime):
                inside = run.resolve().is_relative_to(self.root)  # a symlinked run must not lead out
                if inside and run.is_dir() and any((run / f).is_file() for f in REPORT_FILES):
                    found.setdefault(run.name, run)  # same name elsewhere: the first folder keeps it
        return found

    def _scan(self) -> list[Path]:
        bases = []
        for top, dirs, _files in os.walk(self.root):
            depth = len(Path(top).relative_to(self.root).parts)
            if (Path(top) / ".kcoder" / "runs").is_dir():
                bases.append(Path(top) / ".kcoder" / "runs")
            dirs[:] = [] if depth >= SCAN_DEPTH else [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        return bases

    def listing(self) -> str:
        """The index resource: every run with its folder and report files, as JSON."""
        entries: list[dict[str, Any]] = []
        for name, folder in self.runs().items():
            files = [f for f in REPORT_FILES if (folder / f).is_file()]
            entries.append({"run": name, "folder": str(folder),
                            "resources": [f"kcoder://runs/{name}/{f}" for f in files]})
        return json.dumps(entries, indent=2)

    def read(self, run: str, file: str) -> str:
        """One report file of one run; LookupError says which part is unknown."""
        if file not in REPORT_FILES:
            raise LookupError(f"{file!r} is not a run report (one of {', '.join(REPORT_FILES)})")
        folder = self.runs().get(run)
        if folder is None:
            raise LookupError(f"no run named {run!r} under {self.root} (kcoder://runs lists them)")
        path = folder / file
        if not path.is_file() or not path.resolve().is_relative_to(self.root):
            raise LookupError(f"run {run} has no {file}")
        return path.read_text(encoding="utf-8", errors="replace")
