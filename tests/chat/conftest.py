"""Fixtures for the chat tests: offline litellm, private KCODER_HOME, the scripted server,
a problem copy."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def kcoder_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """History and other per-user files go to a private folder, never ~/.kcoder."""
    home = tmp_path / "kcoder-home"
    monkeypatch.setenv("KCODER_HOME", str(home))
    monkeypatch.setenv("KCODER_API_KEY", "test")
    return home


def pytest_configure(config: pytest.Config) -> None:
    # litellm's own pydantic deprecation noise, not ours.
    config.addinivalue_line("filterwarnings", "ignore:Accessing the 'model_:DeprecationWarning")
