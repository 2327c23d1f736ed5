"""What every process that runs a problem or a candidate does the same way: execute a file
as a module, set the precision policy, and turn an exception into a one-line reason.

Used by the evaluation's processes and by the profiler's target, so both load a candidate,
and set fp32 precision, identically.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

REASON_CHARS = 300  # a verdict's one-line reason is never longer than this
LOG_CHARS = 4000  # nor its log tail


def load_module(path: Path, name: str) -> Any:
    """Execute a Python file as module `name` (frames keep the real file name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for one-line verdict reasons."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:REASON_CHARS]


def file_traceback(exc: BaseException, filename: str) -> tuple[str, str]:
    """(short location, trimmed traceback) focusing on the frames of `filename`."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == filename]
    where = f" at {Path(filename).name}:{mine[-1].lineno}" if mine else ""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-12:])
    return where, text[-LOG_CHARS:]


def set_precision(torch: Any, precision: str) -> None:
    """Strict: fp32 is fp32 everywhere (baselines too). Relaxed: TF32 allowed for all."""
    relaxed = precision == "relaxed"
    torch.backends.cuda.matmul.allow_tf32 = relaxed
    torch.backends.cudnn.allow_tf32 = relaxed
    torch.set_float32_matmul_precision("high" if relaxed else "highest")
