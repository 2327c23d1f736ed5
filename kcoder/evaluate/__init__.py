"""The evaluator: build, verify, time and judge a candidate in a fresh subprocess.

Public entry point: `evaluate(problem_path, candidate_path, options) -> Verdict`; several
candidates of one problem: `EvalSession(problem_path)` (one reference process for all of them).
"""

from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.runner import evaluate
from kcoder.evaluate.session import EvalSession

__all__ = ["EvalOptions", "EvalSession", "evaluate"]
