"""A results log kept across suites, device calls and sessions: `kcoder suite --results FILE`.

One JSON line per verdict, appended (and flushed) as it lands: the problem, the sha256 of the
candidate's source, the kcoder commit, the device's name, torch's version, the evaluation's
options and the verdict's figures. A later suite with the same FILE skips each problem that
already has a row for the same candidate, commit, device and options (unless --force), so a
long problem set runs in slices that each end cleanly (--limit, --time-budget) and the next
slice starts where the last stopped. A row whose status is "error" (kcoder's own failure,
never the candidate's) does not count as done. bench/results_table.py prints the tables.

The commit is $KCODER_COMMIT when set (a copy of the tree without .git, as on a device
machine), else HEAD of the git checkout that tracks this kcoder package, with "+dirty" when its
tracked kcoder/ files differ from it (untracked ones do not count), else "unknown" (no such
checkout, as in a pip install; no git; no commit yet). Git is asked through gitpython, the
repository opened as kcoder/gitops.py opens one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from kcoder.suite.problems import SuiteInputError

NOT_DONE = ("error",)  # statuses that leave the problem to run again
FIGURES = ("compiled", "correct", "reward", "eager_us", "compile_us", "candidate_us", "speedup_vs_eager",
           "speedup_vs_compile", "speedup_vs_compile_ci", "sol_us", "sol_bound", "candidate_sol_fraction",
           "compile_sol_fraction", "eager_sol_fraction", "footprint_mb", "timing_rounds", "implausible")
OPTION_FIELDS = ("precision", "stop_after", "allow", "no_compile")  # a different measurement when they differ


def sha256(text: str | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest() if text is not None else None


def kcoder_commit(root: Path | None = None) -> str:
    """This kcoder's commit (see the module docstring); `root` is the folder that holds the
    `kcoder` package (this one's by default)."""
    if os.environ.get("KCODER_COMMIT"):
        return os.environ["KCODER_COMMIT"].strip()
    from kcoder.gitops import GitOpsError, find_repo
    from kcoder.paths import package_root

    package = (root or package_root()) / "kcoder"
    try:
        repo = find_repo(package)  # also GitOpsError when gitpython or the git executable is missing
    except GitOpsError:
        return "unknown"
    import git

    try:
        path = os.path.relpath(package.resolve(), repo.working_tree_dir)
        if not repo.git.ls_files("--", path):  # not kcoder's checkout (a pip install inside another one)
            return "unknown"
        head = repo.head.commit.hexsha  # ValueError: no commit yet
        dirty = repo.is_dirty(index=True, working_tree=True, untracked_files=False, path=path)
    except (git.GitError, git.BadName, ValueError, OSError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def identity(device: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What the rows of this run share: commit, the device's name and torch's version as a
    verdict states them, and the options that change what a verdict measures. Found in this
    process without importing torch or touching the GPU (the judge's processes own it): the
    name by hostinfo (the CPU's model; the visible GPU's from nvidia-smi), torch's version from
    its version.py. `pending` needs them before any verdict; a row takes its verdict's own."""
    from kcoder.hostinfo import cpu_model, torch_version_field, visible_cuda_device

    name = visible_cuda_device() if device == "cuda" else cpu_model()
    return {"commit": kcoder_commit(), "device": device, "device_name": name,
            "torch_version": torch_version_field("__version__"), "options": options_of(settings)}


def options_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings that change a verdict's meaning, as a row keeps them (the timing budget too)."""
    out = {k: settings.get(k) for k in OPTION_FIELDS}
    out["allow"] = sorted(out["allow"] or [])
    out["budget"] = settings.get("budget")
    return out


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two rows the same measurement."""
    options = row.get("options") or {}
    return (row.get("name"), row.get("candidate_sha256"), row.get("commit"), row.get("device_name"),
            tuple(json.dumps(options.get(k), sort_keys=True) for k in OPTION_FIELDS))


def load(path: Path) -> list[dict[str, Any]]:
    """The rows of a results file ([] when it does not exist; a line cut by a kill is skipped).
    SuiteInputError when it is not a results file (a line that is a JSON value but no row)."""
    if not path.exists():
        return []
    if not path.is_file():
        raise SuiteInputError(f"{path}: the results file is not a file")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a killed run
        if not isinstance(row, dict) or "name" not in row or "candidate_sha256" not in row:
            raise SuiteInputError(f"{path}: line {n} is not a results row (no name or candidate_sha256)")
        rows.append(row)
    return rows


def pending(specs: list[dict[str, Any]], rows: list[dict[str, Any]], ident: dict[str, Any],
            force: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """(the specs still to run, the names skipped because `rows` has them done for this
    candidate, commit, device and options). With `force` nothing is skipped."""
    done = {key(r) for r in rows if r.get("status") not in NOT_DONE}
    todo, skipped = [], []
    for spec in specs:
        row = {"name": spec["name"], "candidate_sha256": sha256(spec.get("solution_source")), **ident}
        if not force and key(row) in done:
            skipped.append(spec["name"])
        else:
            todo.append(spec)
    return todo, skipped


def level_of(problem: str) -> int | None:
    """KernelBench's level from the problem's folder (level1/..., level2/...), else None."""
    found = re.fullmatch(r"level(\d+)", Path(problem).parent.name)
    return int(found.group(1)) if found else None


def row_of(record: dict[str, Any], spec: dict[str, Any], ident: dict[str, Any]) -> dict[str, Any]:
    """One finished problem's row: who measured what, where, and the verdict's figures."""
    verdict = record.get("verdict") or {}
    problem = Path(spec["problem"])
    row = {"name": spec["name"], "level": level_of(spec["problem"]), "problem": f"{problem.parent.name}/{problem.name}",
           "problem_sha256": sha256(spec.get("problem_source")),
           "candidate_sha256": sha256(spec.get("solution_source")),
           "commit": ident["commit"], "device": ident["device"],
           # the verdict's own names win: they say where it really ran
           "device_name": verdict.get("device_name") or ident["device_name"],
           "torch_version": verdict.get("torch_version") or ident["torch_version"],
           "options": ident["options"], "date": time.strftime("%Y-%m-%d %H:%M"),
           "status": record.get("status", "error"), "reason": str(record.get("reason") or "")[:300],
           "seconds": record.get("seconds")}
    row.update({f: verdict.get(f) for f in FIGURES})
    if row["status"] == "error" and verdict.get("log"):  # kcoder's own failure: what its process said last
        row["log_tail"] = str(verdict["log"])[-1500:]
    return row


def append(path: Path, row: dict[str, Any]) -> None:
    """Persist one row (a whole line per write, flushed to disk)."""
    from kcoder.redact import redact_data

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(redact_data(row), default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
