"""Where the profile target runs: the candidate's and the problem's code, confined like the
evaluator's candidate process.

`kcoder profile`, tune's resource step and its Nsight Compute profiles all run
profile/target.py, which imports the problem and the candidate. Neither was written by kcoder,
so the target runs from copies of both files in a private box (evaluate/sandbox.py): a
scrubbed environment (no credentials; HOME and TMPDIR private), bwrap when available (your
HOME hidden, the filesystem read-only but for the box and the candidate's private build folder,
no network), and
every process it started killed when the step ends. Under ncu, ncu runs inside the box too:
ncu and its target must share one namespace to talk to each other.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcoder.build.requests import PRIVATE_ROOT_ENV, private_build_root
from kcoder.evaluate.sandbox import Box, confined_command, kill_all, resolve_mode
from kcoder.paths import cache_root
from kcoder.procs import RunResult, run


def build_dirs(prep: dict[str, Any], ok_only: bool = False) -> list[Path]:
    """The CUDA build directories a prepare step reported, kept only inside kcoder's build
    cache: the report is the target's writing, and the ptxas step reads what it names."""
    cache = (cache_root() / "build").resolve()
    dirs = [Path(str(b["dir"])).resolve() for b in prep.get("builds", [])
            if isinstance(b, dict) and b.get("cuda") and b.get("dir") and (b.get("ok") or not ok_only)]
    return [d for d in dirs if d.is_relative_to(cache)]


@dataclass
class TargetBox:
    """One profile's box: the files' copies, the job, the sandbox mode (and why it is weaker)."""

    box: Box
    mode: str
    device: str
    problem: Path
    candidate: Path
    note: str | None = None

    @classmethod
    def create(cls, parent: Path, problem: Path, candidate: Path, sandbox: str, device: str = "cuda") -> TargetBox:
        mode, note = resolve_mode(sandbox)
        box = Box.create(parent)
        problem_copy, candidate_copy = box.root / problem.name, box.root / candidate.name
        if problem_copy == candidate_copy:
            candidate_copy = box.root / f"candidate_{candidate.name}"
        shutil.copyfile(problem, problem_copy)
        shutil.copyfile(candidate, candidate_copy)
        return cls(box, mode, device, problem_copy, candidate_copy, note)

    @property
    def root(self) -> Path:
        """The box's folder: the one place (with its private build folder) its processes may write."""
        return self.box.root

    def write_job(self, data: dict[str, Any]) -> Path:
        """The target's job, naming the copies (never the user's files)."""
        job = self.root / "job.json"
        job.write_text(json.dumps({**data, "problem": str(self.problem), "candidate": str(self.candidate)}))
        return job

    def command(self, argv: list[str], visible: tuple[Path, ...] = (), **env: str) -> tuple[list[str], dict[str, str]]:
        """`argv` and its environment as they run in the box: the job and copies read-only, and
        `visible` folders too (ncu's own, should it live in a folder bwrap hides: HOME, /tmp)."""
        job = [self.root / "job.json"] if (self.root / "job.json").exists() else []
        read_only = [self.problem, self.candidate, *job, *(p for p in visible if p.exists())]
        # Its builds: the shared cache read-only (an evaluation's builds are found there), new
        # ones in the candidate file's private build folder (no build service runs here).
        own = private_build_root(self.candidate)
        own.mkdir(parents=True, exist_ok=True)
        return confined_command(argv, self.box, self.device, self.mode, read_only, [own],
                                **{PRIVATE_ROOT_ENV: str(own), **env})

    def run(self, argv: list[str], timeout_s: float, **env: str) -> RunResult:
        """Run `argv` in the box under `timeout_s`; every process it started is gone afterwards."""
        full, child_env = self.command(argv, **env)
        try:
            return run(full, timeout_s, self.root, child_env)
        finally:
            kill_all(self.box.marker)
