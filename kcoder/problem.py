"""Load and validate a KernelBench-style problem file without running it in kcoder's process.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.
Structure is checked here, statically; whether the inputs really are tensors/scalars is
checked in the worker (which executes the file), and reported with the same wording.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path


class ProblemError(Exception):
    """A problem or candidate file is unusable. The message names the file and the problem."""


@dataclass(frozen=True)
class Problem:
    path: Path
    name: str  # file stem, used for run directories and git branches
    source: str
    sha256: str


def _parse(path: Path, what: str) -> tuple[str, ast.Module]:
    if not path.exists():
        raise ProblemError(f"{path}: no such file (expected a {what}).")
    if not path.is_file():
        raise ProblemError(f"{path}: not a regular file (expected a {what}).")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: not UTF-8 text ({exc.reason}); expected a Python {what}.") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(
            f"{path}:{exc.lineno}: syntax error: {exc.msg}. The {what} must be valid Python."
        ) from None
    return source, tree


def _top_level_names(tree: ast.Module) -> dict[str, str]:
    """Names bound at module level -> 'class' | 'function' | 'other'."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = "function"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    names.setdefault(t.id, "other")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], "other")
    return names


def load_problem(path: str | Path) -> Problem:
    """Read and statically validate a problem file; raise ProblemError naming what is missing."""
    path = Path(path)
    source, tree = _parse(path, "problem file")
    names = _top_level_names(tree)
    missing = []
    if names.get("Model") != "class":
        missing.append("a class `Model(nn.Module)`")
    if "get_inputs" not in names:
        missing.append("a function `get_inputs()` returning the forward inputs")
    if "get_init_inputs" not in names:
        missing.append("a function `get_init_inputs()` returning the constructor arguments")
    if missing:
        raise ProblemError(
            f"{path}: not a KernelBench-style problem: it lacks {', '.join(missing)}. "
            "A problem file defines `class Model(nn.Module)`, `get_inputs()` and "
            "`get_init_inputs()` (see examples/ for complete files)."
        )
    digest = hashlib.sha256(source.encode()).hexdigest()
    return Problem(path=path.resolve(), name=path.stem, source=source, sha256=digest)


def check_candidate_file(path: str | Path) -> str:
    """Read a candidate file and check that it defines `ModelNew`; return its source."""
    path = Path(path)
    source, tree = _parse(path, "candidate file")
    if _top_level_names(tree).get("ModelNew") != "class":
        raise ProblemError(
            f"{path}: the candidate defines no class `ModelNew(nn.Module)`. A candidate file "
            "defines ModelNew with Model's constructor signature and builds its kernels with "
            "torch.utils.cpp_extension.load_inline."
        )
    return source
