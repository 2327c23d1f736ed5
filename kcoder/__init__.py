"""kcoder: make a PyTorch module faster with custom kernels, judged by an honest evaluator.

Nothing heavy is imported here: `kcoder --help` must stay instant (no torch, no litellm).
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"


def bundled_path(name: str) -> Path:
    """Folder of a bundled resource ("skills" or "tools"): the top-level folder in a source
    checkout, or the copy shipped inside the package (kcoder/_bundled/<name>) in a wheel."""

    here = Path(__file__).resolve().parent
    checkout = here.parent / name
    return checkout if checkout.is_dir() else here / "_bundled" / name
