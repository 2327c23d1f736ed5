"""Which problems a suite runs and, in eval mode, which solution goes with each.

Problem sets: problem files, folders, globs, or a KernelBench checkout with a level
(`KernelBench/level{N}/*.py`, read where it is, never copied). A folder holding
`<name>/model.py` is an examples-style set (the problem is named by its folder); any other
folder holds problem files (`<name>.py`). Solutions, matched by name in `--solutions DIR`:
`<name>.py`, `<name>_solution*.py`, `<name>/solution_<device>.py` or `<name>/model_new.py`; an
examples-style problem also finds `solution_<device>.py` beside its model.py.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path


class SuiteInputError(ValueError):
    """A problem set or solutions folder that cannot be used (the message names it)."""


@dataclass(frozen=True)
class SuiteProblem:
    name: str  # unique within the suite: results, resume and tables key on it
    path: Path
    solution: Path | None = None


def collect_problems(sources: list[str], level: int | None = None) -> list[SuiteProblem]:
    """The problems of `sources` (files, folders, globs; with `level`, KernelBench checkouts),
    sorted by name. SuiteInputError for a source that names nothing or a name used twice."""
    found: list[SuiteProblem] = []
    for source in sources:
        found += _kernelbench(Path(source), level) if level is not None else _expand(source)
    names: dict[str, Path] = {}
    for p in found:
        if p.name in names and names[p.name] != p.path:
            raise SuiteInputError(f"{p.path}: a second problem named {p.name!r} (the first is {names[p.name]})")
        names[p.name] = p.path
    unique = {p.name: p for p in found}
    if not unique:
        raise SuiteInputError(f"no problem files in {', '.join(sources)}")
    return [unique[n] for n in sorted(unique)]


def _kernelbench(root: Path, level: int) -> list[SuiteProblem]:
    for folder in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
        if folder.is_dir():
            return [SuiteProblem(p.stem, p.resolve()) for p in sorted(folder.glob("*.py"))]
    raise SuiteInputError(f"{root}: no KernelBench/level{level} folder (expected a KernelBench checkout)")


def _expand(source: str) -> list[SuiteProblem]:
    path = Path(source)
    if path.is_file():
        return [_one(path)]
    if path.is_dir() and (path / "model.py").is_file():  # one examples-style problem
        return [_one(path / "model.py")]
    if path.is_dir():
        models = sorted(path.glob("*/model.py"))
        if models:
            return [_one(m) for m in models]
        return [_one(p) for p in sorted(path.glob("*.py")) if not p.name.startswith("_")]
    matches = sorted(Path(m) for m in glob.glob(source, recursive=True) if Path(m).is_file())
    if not matches:
        raise SuiteInputError(f"{source}: no such file or folder, and no file matches it as a glob")
    return [_one(p) for p in matches]


def _one(path: Path) -> SuiteProblem:
    path = path.resolve()
    return SuiteProblem(path.parent.name if path.name == "model.py" else path.stem, path)


def attach_solutions(problems: list[SuiteProblem], solutions: Path | None, device: str) -> list[SuiteProblem]:
    """Each problem with its solution file (None when there is none: that problem counts as
    not compiled). SuiteInputError when `solutions` is not a folder."""
    if solutions is not None and not solutions.is_dir():
        raise SuiteInputError(f"{solutions}: the solutions folder does not exist")
    return [SuiteProblem(p.name, p.path, find_solution(p, solutions, device)) for p in problems]


def find_solution(problem: SuiteProblem, solutions: Path | None, device: str) -> Path | None:
    """The solution of `problem` by the naming rules above, or None."""
    candidates: list[Path] = []
    if solutions is not None:
        candidates += [solutions / f"{problem.name}.py"]
        candidates += sorted(solutions.glob(f"{glob.escape(problem.name)}_solution*.py"))
        candidates += [solutions / problem.name / f"solution_{device}.py", solutions / problem.name / "model_new.py"]
    if problem.path.name == "model.py":
        candidates.append(problem.path.parent / f"solution_{device}.py")
    for candidate in candidates:
        if candidate.is_file() and candidate.resolve() != problem.path:
            return candidate.resolve()
    return None
