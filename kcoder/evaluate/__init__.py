"""The evaluator: build, verify, time and judge a candidate in a fresh subprocess.

Public entry point: `evaluate(problem_path, candidate_path, options) -> Verdict`; several
candidates of one problem: `EvalSession(problem_path)` (one reference process for all of them).

Where each part runs (the trust boundary): the modules at this level are the judge's process;
reference/ runs in the reference process (trusted: no candidate code ever loads there);
candidate/ runs in the candidate's process (trusted by no one once the candidate loads);
harness/ runs in both implementation processes, each its own copy; static/ reads the
candidate's source before anything of it runs. The names below are resolved on first use, so
the processes that import a submodule (the reference's, the candidate's) load none of the
judge's modules with it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EvalOptions", "EvalSession", "evaluate"]
_HOMES = {"EvalOptions": "kcoder.evaluate.options", "evaluate": "kcoder.evaluate.runner",
          "EvalSession": "kcoder.evaluate.session"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'kcoder.evaluate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
