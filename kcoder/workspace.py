"""The run directory of one optimization run: reference copy, candidates, trajectory, best, report.

Layout of `.kcoder/runs/<problem-stem>-<stamp>/`:

    model.py              read-only copy of the user's problem (sha256 in meta.json)
    model_new.py          the current candidate, edited by the agent
    candidates/           a snapshot of every candidate the evaluator judged
    trajectory.jsonl      one JSON record per message / verdict, appended as it happens
    best/model_new.py     the best verified candidate so far (+ best/verdict.json)
    report.md, report.json
    meta.json             problem path and hash, created time

The user's own file is only ever read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcoder.gitexclude import exclude_from_git
from kcoder.paths import runs_root
from kcoder.redact import redact, redact_data
from kcoder.relpaths import relative_paths, repo_top
from kcoder.verdict import Verdict

REFERENCE = "model.py"
CANDIDATE = "model_new.py"
TRAJECTORY = "trajectory.jsonl"
META = "meta.json"
BEST_DIR = "best"
CANDIDATES_DIR = "candidates"
# Files the agent may read but never write: the evaluator and the report rely on them.
PREFLIGHT = "preflight.json"  # the reference's baselines and speed of light (agent/preflight.py)
PROTECTED = (REFERENCE, TRAJECTORY, META, "report.md", "report.json", BEST_DIR, CANDIDATES_DIR, PREFLIGHT)


class WorkspaceError(Exception):
    """A path or run directory problem, phrased for the user or the model."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Workspace:
    """One run directory. Create with `Workspace.create`, reopen with `Workspace.open`."""

    root: Path

    # --- creation -----------------------------------------------------------------------
    @classmethod
    def create(cls, problem_path: Path, runs_dir: Path | None = None,
               stamp: str | None = None) -> Workspace:
        """Make a fresh run directory for `problem_path` and copy the reference in, read-only."""
        problem_path = Path(problem_path).resolve()
        source = problem_path.read_text(encoding="utf-8")
        base = Path(runs_dir) if runs_dir else runs_root(problem_path)
        stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
        root = base / f"{problem_path.stem}-{stamp}"
        n = 1
        while root.exists():  # two runs in the same second must not share a directory
            n += 1
            root = base / f"{problem_path.stem}-{stamp}-{n}"
        root.mkdir(parents=True)
        if runs_dir is None:  # kcoder's own .kcoder/runs: keep it out of the user's git status
            exclude_from_git(base)
        ws = cls(root.resolve())
        ref = ws.root / REFERENCE
        ref.write_text(source, encoding="utf-8")
        ref.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        (ws.root / CANDIDATES_DIR).mkdir()
        meta = {"problem": str(problem_path), "problem_sha256": sha256_text(source),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        ws._write_json(META, meta)
        return ws

    @classmethod
    def open(cls, run_dir: Path) -> Workspace:
        """Reopen an existing run (for --resume); checks the reference copy is untouched."""
        root = Path(run_dir).resolve()
        if not (root / META).is_file() or not (root / REFERENCE).is_file():
            raise WorkspaceError(f"{run_dir}: not a kcoder run directory (no {META} / {REFERENCE})")
        ws = cls(root)
        if sha256_text(ws.reference_source()) != ws.meta()["problem_sha256"]:
            raise WorkspaceError(f"{root / REFERENCE}: reference copy changed since the run began")
        return ws

    # --- paths --------------------------------------------------------------------------
    @property
    def reference(self) -> Path:
        return self.root / REFERENCE

    @property
    def candidate(self) -> Path:
        return self.root / CANDIDATE

    @property
    def best_dir(self) -> Path:
        return self.root / BEST_DIR

    @property
    def trajectory_path(self) -> Path:
        return self.root / TRAJECTORY

    def meta(self) -> dict[str, Any]:
        return json.loads((self.root / META).read_text(encoding="utf-8"))

    def problem_path(self) -> Path:
        """The user's original problem file (as recorded when the run began)."""
        return Path(self.meta()["problem"])

    def reference_source(self) -> str:
        return self.reference.read_text(encoding="utf-8")

    def resolve(self, path: str, *, write: bool = False) -> Path:
        """Map a path the model gave to a file inside the workspace, or raise WorkspaceError.

        Relative paths are taken from the workspace root; absolute paths must already lie
        inside it. Symlinks are resolved first, so a link cannot lead outside.
        """
        if not isinstance(path, str) or not path.strip():
            raise WorkspaceError("path must be a non-empty string")
        raw = Path(path.strip())
        target = (raw if raw.is_absolute() else self.root / raw).resolve()
        if target != self.root and self.root not in target.parents:
            raise WorkspaceError(f"{path}: outside the run workspace; use paths like {CANDIDATE}")
        if write:
            rel = target.relative_to(self.root)
            if not rel.parts:
                raise WorkspaceError(f"{path}: is the workspace directory, not a file")
            if rel.parts[0] in PROTECTED:
                raise WorkspaceError(f"{rel}: read-only (kept by kcoder); write {CANDIDATE} instead")
        return target

    def relative(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self.root))
        except ValueError:
            return str(path)

    # --- candidates and best ----------------------------------------------------------------
    def snapshot(self, source_path: Path) -> Path:
        """Copy a candidate into candidates/ under a numbered name the evaluator can import;
        an identical earlier snapshot is reused."""
        folder = self.root / CANDIDATES_DIR
        folder.mkdir(exist_ok=True)
        existing = sorted(folder.glob("model_new_*.py"))
        data = Path(source_path).read_bytes()
        for old in reversed(existing):  # compile, verify, benchmark of one file: one snapshot
            if old.read_bytes() == data:
                return old
        n = len(existing) + 1
        dest = folder / f"model_new_{n:04d}.py"
        shutil.copyfile(source_path, dest)
        return dest

    def save_best(self, source_path: Path, verdict: Verdict) -> Path:
        """Keep `source_path` as the best verified candidate, with its verdict beside it."""
        self.best_dir.mkdir(exist_ok=True)
        dest = self.best_dir / CANDIDATE
        tmp = dest.with_suffix(".tmp")
        shutil.copyfile(source_path, tmp)
        os.replace(tmp, dest)  # atomic: a killed run never leaves half a best file
        self._write_json(f"{BEST_DIR}/verdict.json", verdict.to_dict())
        return dest

    def best_verdict(self) -> Verdict | None:
        """The best verified candidate's verdict (also from runs of older kcoder versions)."""
        path = self.best_dir / "verdict.json"
        if not path.is_file() or not (self.best_dir / CANDIDATE).is_file():
            return None
        return Verdict.from_dict(json.loads(path.read_text(encoding="utf-8")))

    # --- trajectory -------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Append one record to trajectory.jsonl and flush it to disk straight away."""
        line = json.dumps(redact_data(record), ensure_ascii=False, default=str)
        path = self.trajectory_path
        # A run killed mid-write leaves a torn last line: start on a fresh line after it.
        torn = path.is_file() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
        with path.open("a", encoding="utf-8") as fh:
            fh.write(("\n" if torn else "") + line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read_trajectory(self) -> list[dict[str, Any]]:
        """All complete records; a torn last line (killed mid-write) is skipped."""
        if not self.trajectory_path.is_file():
            return []
        records = []
        for line in self.trajectory_path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records

    def preflight(self) -> dict[str, Any] | None:
        """The roofline preflight's figures (agent/preflight.py), or None when it did not run."""
        try:
            return json.loads((self.root / PREFLIGHT).read_text())
        except (OSError, ValueError):
            return None

    def save_preflight(self, figures: dict[str, Any]) -> None:
        self._write_json(PREFLIGHT, figures)

    # --- report -----------------------------------------------------------------------------
    def write_report(self, report: dict[str, Any]) -> None:
        """Write report.json and a human-readable report.md, with paths relative to the
        repository holding the problem (else to the problem's folder): reports get shared."""
        problem = self.problem_path()
        report = relative_paths(report, repo_top(problem.parent) or problem.parent)
        self._write_json("report.json", report)
        (self.root / "report.md").write_text(redact(render_report_md(report)), encoding="utf-8")

    def _write_json(self, rel: str, data: dict[str, Any]) -> None:
        path = self.root / rel
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(redact_data(data), indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}{suffix}"
    return f"{value}{suffix}"


def _reference_lines(ref: dict[str, Any] | None) -> list[str]:
    """The roofline preflight's figures (agent/preflight.py), when it ran."""
    if not ref:
        return []
    lines = [f"- reference: eager {_fmt(ref.get('eager_us'), ' us')}  ·  torch.compile "
             f"{_fmt(ref.get('compile_us'), ' us')}  ·  speed of light {_fmt(ref.get('sol_us'), ' us')} "
             f"({ref.get('sol_bound') or '?'}-bound; {ref.get('sol_ceilings') or ''})"]
    if ref.get("compile_headroom"):
        lines.append(f"- the SOL allows at most {ref['compile_headroom']:.2f}x over torch.compile")
    return lines


def render_report_md(report: dict[str, Any]) -> str:
    """Markdown summary of a run: outcome, the best candidate's verdict, usage."""
    best = report.get("best") or {}
    lines = [
        f"# kcoder run: {report.get('problem', '?')}",
        "",
        f"- outcome: **{report.get('status', '?')}** — {report.get('message', '')}",
        (f"- target: {_fmt(report.get('target'), 'x')} torch.compile "
        f"(reached: {'yes' if report.get('target_reached') else 'no'})"),
        (f"- model: {report.get('model', '?')}  ·  device: {report.get('device', '?')} "
        f"{report.get('device_name') or ''}"),
        (f"- turns: {report.get('turns', 0)}  ·  tokens: {report.get('prompt_tokens', 0)} in / "
        f"{report.get('completion_tokens', 0)} out  ·  cost: ${report.get('cost', 0.0):.4f}"),
        f"- wall time: {_fmt(report.get('seconds'), ' s')}",
        *_reference_lines(report.get("reference")),
        "",
        "## Best verified candidate",
        "",
    ]
    if not best:
        lines.append("None: no candidate passed verification.")
    else:
        lines += [
            f"- file: `{report.get('best_path', 'best/model_new.py')}`",
            (f"- verdict: {best.get('reason', '')} (stage {best.get('stage')}, "
            f"reward {best.get('reward')})"),
            f"- speed-up vs eager: {_fmt(best.get('speedup_vs_eager'), 'x')}",
            f"- speed-up vs torch.compile: {_fmt(best.get('speedup_vs_compile'), 'x')}",
            (f"- candidate: {_fmt(best.get('candidate_us'), ' us')}  ·  eager: "
            f"{_fmt(best.get('eager_us'), ' us')}  ·  compile: {_fmt(best.get('compile_us'), ' us')}"),
            f"- share of the speed of light: {_fmt(best.get('candidate_sol_fraction'))}",
        ]
    lines += _sizes_md(report.get("sizes"))
    lines += _policy_md(report.get("policy"))
    lines.append("")
    return "\n".join(lines)


def _sizes_md(sizes: dict[str, Any] | None) -> list[str]:
    """optimize --shapes NAME=SIZES: the best kernel judged at each size (agent/sizes.py)."""
    if not sizes:
        return []
    from kcoder.agent.sizes import size_lines

    return ["", f"## By batch size (--shapes {sizes['spec']})", "",
            *[f"- {line}" for line in size_lines(sizes["rows"], sizes["name"])]]


def _policy_md(policy: dict[str, Any] | None) -> list[str]:
    """The built-in policy's section: its kernels, or the ops it could not lower."""
    if not policy:
        return []
    lines = ["", "## Built-in policy", ""]
    lines += [f"- {k}" for k in policy.get("kernels", [])]
    if policy.get("unsupported"):
        listed = ", ".join(f"{op} x{n}" for op, n in policy["unsupported"].items())
        lines.append(f"- unsupported: {listed}")
    if policy.get("error") and not policy.get("unsupported"):
        lines.append(f"- {policy['error']}")
    return lines
