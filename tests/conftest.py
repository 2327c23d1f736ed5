"""Shared fixtures and the test environment; shared helpers are in helpers.py.

Tests share one kcoder build cache per run so each distinct kernel source is compiled once
(a cold CPU build costs ~30-60 s on two cores). The cache is a fresh directory, never the
user's ~/.cache/kcoder, so no run sees builds a previous run left; KCODER_TEST_CACHE names a
directory to keep between local runs instead."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Before litellm is first imported: no cost-map download, no proxy for 127.0.0.1.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ["NO_PROXY"] = "127.0.0.1,localhost," + os.environ.get("NO_PROXY", "")
os.environ["no_proxy"] = os.environ["NO_PROXY"]
# Before any test builds: the CLI subprocesses inherit it as well.
os.environ["KCODER_CACHE"] = os.environ.get("KCODER_TEST_CACHE") or tempfile.mkdtemp(prefix="kcoder-test-cache-")
# Every test times its own baselines (tests of the baseline cache turn reuse back on).
os.environ["KCODER_FRESH_BASELINES"] = "1"

from helpers import PROBLEMS, fast_options  # noqa: E402  (after the environment is set)


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
    from kcoder.evaluate import evaluate

    def run(source: str, problem: str = "scale_add.py", **options):
        return evaluate(PROBLEMS / problem, write_candidate(source), fast_options(**options))

    return run


@pytest.fixture
def scripted():
    """Start a scripted OpenAI-compatible server per call (tests/agent/llm_server.py);
    all are stopped afterwards."""
    from agent.llm_server import ScriptedLLMServer

    servers = []

    def make(script, **kw):
        server = ScriptedLLMServer(script, **kw).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def example_verdict():
    """Each example's solution_cpu.py judged once per run (fast_options(), torch.compile baseline
    included): a verdict is 40-60 s of CI on two cores, and several tests read the same one."""
    from kcoder.evaluate import evaluate

    verdicts = {}

    def judge(example: Path):
        if example not in verdicts:
            verdicts[example] = evaluate(example / "model.py", example / "solution_cpu.py", fast_options())
        return verdicts[example]

    return judge


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    """A private copy of tests/problems/scale_add.py (so run dirs land in tmp_path)."""
    dest = tmp_path / "proj" / "scale_add.py"
    dest.parent.mkdir()
    shutil.copyfile(PROBLEMS / "scale_add.py", dest)
    return dest
