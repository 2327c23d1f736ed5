"""Static checks on a candidate's source before it runs. Each finding names its trick.

Python is checked on the AST (python.py, with the tables in rules.py): modules
whose every use is a trick are refused at import, other modules by the names the code reaches
in them. The C++/CUDA sources, which are string constants of the file, are checked by patterns
on the text as the compiler reads it, macros expanded (native.py, with interp.py
for Python reached from C++ and lowlevel.py for load-time code, allocators, page
protection, signals and symbol lookups). A string the file builds from constants (joins,
`%`, `.format`, f-strings, names bound once: fold.py) is read whole too, by both. What the
file builds at run time is read where it reaches the compiler: kcoder's build service runs the
native rules on the text `load_inline` compiles (compiled.py: `build_findings`) before it builds.
These checks are a first line; the sandbox, the run-time guard and the dynamic checks in
verify/timing back them up.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kcoder.evaluate.static.compiled import BuildFinding, build_findings
from kcoder.evaluate.static.python import Checker

__all__ = ["BuildFinding", "Finding", "build_findings", "check_source"]


@dataclass(frozen=True)
class Finding:
    check: str  # short id, e.g. "stream", "thread", "monkeypatch"
    line: int
    message: str

    def describe(self, filename: str) -> str:
        return f"static check [{self.check}]: {self.message} ({filename}:{self.line})"


def check_source(source: str, *, allow: list[str] | None = None,
                 reference_stems: set[str] | None = None) -> list[Finding]:
    """Return every static finding for a candidate's source, in line order."""
    tree = ast.parse(source)
    checker = Checker(list(allow or []), set(reference_stems or ()))
    checker.fold_budget += 4 * len(source)
    checker.run(tree)
    unique = {(check, line, message): Finding(check, line, message) for check, line, message in checker.findings}
    return sorted(unique.values(), key=lambda f: f.line)
