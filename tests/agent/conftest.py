"""Fixtures for the agent tests: offline litellm, a scripted server, a problem copy."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Before litellm is first imported: no cost-map download, no proxy for 127.0.0.1.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ["NO_PROXY"] = "127.0.0.1,localhost," + os.environ.get("NO_PROXY", "")
os.environ["no_proxy"] = os.environ["NO_PROXY"]

from .llm_server import ScriptedLLMServer

PROBLEMS = Path(__file__).resolve().parent.parent / "problems"


@pytest.fixture
def scripted() -> Iterator[Callable[[list[dict[str, Any]]], ScriptedLLMServer]]:
    """Start a scripted OpenAI-compatible server per call; all are stopped afterwards."""
    servers: list[ScriptedLLMServer] = []

    def make(script: list[dict[str, Any]], **kw: Any) -> ScriptedLLMServer:
        server = ScriptedLLMServer(script, **kw).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    """A private copy of tests/problems/scale_add.py (so run dirs land in tmp_path)."""
    dest = tmp_path / "proj" / "scale_add.py"
    dest.parent.mkdir()
    shutil.copyfile(PROBLEMS / "scale_add.py", dest)
    return dest


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key the scripted server is reached with (read by kcoder for --api-base servers)."""
    monkeypatch.setenv("KCODER_API_KEY", "test")
    return "test"


def pytest_configure(config: pytest.Config) -> None:
    # litellm's own pydantic deprecation noise, not ours.
    config.addinivalue_line("filterwarnings", "ignore:Accessing the 'model_:DeprecationWarning")
