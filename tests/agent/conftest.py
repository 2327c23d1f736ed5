"""Fixtures for the agent tests: offline litellm, a scripted server, a problem copy."""

from __future__ import annotations

import pytest


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key the scripted server is reached with (read by kcoder for --api-base servers)."""
    monkeypatch.setenv("KCODER_API_KEY", "test")
    return "test"


def pytest_configure(config: pytest.Config) -> None:
    # litellm's own pydantic deprecation noise, not ours.
    config.addinivalue_line("filterwarnings", "ignore:Accessing the 'model_:DeprecationWarning")
