"""Fixtures for the chat tests: offline litellm, private KCODER_HOME, the scripted server,
a problem copy."""

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

from agent.llm_server import ScriptedLLMServer  # noqa: E402  (tests/ is on sys.path)

PROBLEMS = Path(__file__).resolve().parent.parent / "problems"


@pytest.fixture(autouse=True)
def kcoder_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """History and other per-user files go to a private folder, never ~/.kcoder."""
    home = tmp_path / "kcoder-home"
    monkeypatch.setenv("KCODER_HOME", str(home))
    monkeypatch.setenv("KCODER_API_KEY", "test")
    return home


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedLLMServer]]:
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
    dest = tmp_path / "proj" / "scale_add.py"
    dest.parent.mkdir()
    shutil.copyfile(PROBLEMS / "scale_add.py", dest)
    return dest


def pytest_configure(config: pytest.Config) -> None:
    # litellm's own pydantic deprecation noise, not ours.
    config.addinivalue_line("filterwarnings", "ignore:Accessing the 'model_:DeprecationWarning")
