"""Shared fixtures. Tests share one kcoder build cache per run so each distinct kernel
source is compiled once (a cold CPU build costs ~30-60 s on two cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "tests" / "problems"
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def fast_options(**overrides):
    """EvalOptions with a short timing phase, for tests."""
    from kcoder.harness import EvalOptions

    base = dict(device="cpu", warmup=1, min_rounds=5, max_rounds=20, timing_budget_s=0.3,
                audit_every=2)
    base.update(overrides)
    return EvalOptions(**base)


@pytest.fixture
def write_candidate(tmp_path):
    """Write candidate source to a file in tmp_path and return its path."""

    def write(source: str, name: str = "model_new.py") -> Path:
        path = tmp_path / name
        path.write_text(source)
        return path

    return write


@pytest.fixture
def evaluate_candidate(write_candidate):
    """Evaluate candidate source against a problem in tests/problems (default scale_add)."""
    from kcoder.harness import evaluate

    def run(source: str, problem: str = "scale_add.py", **options):
        return evaluate(PROBLEMS / problem, write_candidate(source), fast_options(**options))

    return run


def run_kcoder(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "kcoder", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full_env, timeout=900)


def run_json(*args: str, **kwargs) -> tuple[int, dict]:
    proc = run_kcoder(*args, "--json", **kwargs)
    return proc.returncode, json.loads(proc.stdout)
