"""The evaluator: build, verify, time and judge a candidate in a fresh subprocess.

Public entry point: `evaluate(problem_path, candidate_path, options) -> Verdict`.
"""

from kcoder.harness.options import EvalOptions
from kcoder.harness.runner import evaluate

__all__ = ["EvalOptions", "evaluate"]
