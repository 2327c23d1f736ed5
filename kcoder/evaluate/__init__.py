"""The evaluator: build, verify, time and judge a candidate in a fresh subprocess.

Public entry point: `evaluate(problem_path, candidate_path, options) -> Verdict`.
"""

from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.runner import evaluate

__all__ = ["EvalOptions", "evaluate"]
