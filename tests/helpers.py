"""Helpers shared by the tests (fixtures live in conftest.py). pytest puts tests/ on
sys.path (`pythonpath` in pyproject.toml), so test modules import this as `helpers`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "tests" / "problems"


def fast_options(**overrides):
    """EvalOptions with a short timing phase, for tests."""
    from kcoder.evaluate import EvalOptions

    base = dict(device="cpu", warmup=1, min_rounds=5, max_rounds=20, timing_budget_s=0.3,
                audit_every=2)
    base.update(overrides)
    return EvalOptions(**base)


def run_kcoder(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "kcoder", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full_env, timeout=900)


def run_json(*args: str, **kwargs) -> tuple[int, dict]:
    """Run the CLI with --json; return its exit code and the parsed report."""
    proc = run_kcoder(*args, "--json", **kwargs)
    return proc.returncode, json.loads(proc.stdout)
