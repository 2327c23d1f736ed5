"""kcoder: make a PyTorch module faster with custom kernels, judged by an honest evaluator.

Nothing heavy is imported here: `kcoder --help` must stay instant (no torch, no litellm).
"""

__version__ = "0.1.0"
