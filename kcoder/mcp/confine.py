"""Path confinement for `kcoder mcp`: a calling agent names files, the server reads only inside
the folders it was given.

An MCP client is another program (often a model acting for the user): without a fence it could
ask kcoder to read, run or write anything the user can. Every path a tool receives is resolved
(relative to the server's root, symlinks followed, `..` collapsed) and must then lie inside the
root or, for the files that go with a problem, inside the problem's folder.
"""

from __future__ import annotations

from pathlib import Path


class ConfinementError(ValueError):
    """A path outside the folders the server may use; the message names the path and the folders."""


class Confinement:
    """The folders a server may use: its root (the start directory or --root)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def resolve(self, path: str | Path, what: str, extra: tuple[Path, ...] = ()) -> Path:
        """`path` (relative paths from the root) resolved, symlinks included; ConfinementError
        when it lies outside the root and every folder in `extra`."""
        text = str(path).strip()
        if not text:
            raise ConfinementError(f"{what}: empty path")
        if "\0" in text:
            raise ConfinementError(f"{what}: the path contains a NUL byte")
        # strict=False: a missing file is reported by the caller, which knows what it expected
        resolved = (self.root / Path(text).expanduser()).resolve()
        allowed = (self.root, *(Path(e).resolve() for e in extra))
        if not any(resolved == folder or resolved.is_relative_to(folder) for folder in allowed):
            names = " or ".join(str(f) for f in allowed)
            raise ConfinementError(f"{what} {text}: resolves to {resolved}, outside the allowed folders ({names}); "
                                   "kcoder mcp only uses files under the folder it was started in (or --root)")
        return resolved

    def problem(self, path: str | Path) -> Path:
        """A problem file: inside the root, and an existing file."""
        resolved = self.resolve(path, "problem")
        if not resolved.is_file():
            raise ConfinementError(f"problem {path}: no such file ({resolved})")
        return resolved

    def beside(self, problem: Path, path: str | Path, what: str) -> Path:
        """A file that goes with `problem` (a candidate): inside the root or the problem's folder,
        and an existing file."""
        resolved = self.resolve(path, what, extra=(problem.parent,))
        if not resolved.is_file():
            raise ConfinementError(f"{what} {path}: no such file ({resolved})")
        return resolved
