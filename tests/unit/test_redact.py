"""Secrets never reach an artifact: trajectories, reports and commits carry no secret value."""

from __future__ import annotations

import json

from kcoder.redact import REDACTED, is_secret_name, redact, redact_data, secret_values
from kcoder.workspace import Workspace


def test_secret_names_and_values(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-abcdef123456")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_zzzzzzzzzzzz")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    assert is_secret_name("ANTHROPIC_API_KEY") and is_secret_name("AWS_ACCESS_KEY_ID")
    assert not is_secret_name("TORCH_CUDA_ARCH_LIST") and not is_secret_name("PATH")
    assert "sk-live-abcdef123456" in secret_values() and "9.0" not in secret_values()
    text = "key sk-live-abcdef123456 and ghp_zzzzzzzzzzzz"
    assert redact(text) == f"key {REDACTED} and {REDACTED}"
    assert redact_data({"a": [text], "n": 3}) == {"a": [f"key {REDACTED} and {REDACTED}"], "n": 3}


def test_trajectory_and_report_are_redacted(monkeypatch, tmp_path):
    monkeypatch.setenv("MY_SERVICE_SECRET", "hunter2-very-secret")
    problem = tmp_path / "scale_add.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n"
                       "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    ws = Workspace.create(problem)
    ws.append({"role": "tool", "content": "the candidate raised: hunter2-very-secret"})
    ws.write_report({"reason": "leaked hunter2-very-secret", "reward": -1})
    stored = ws.trajectory_path.read_text() + (ws.root / "report.json").read_text() + \
        (ws.root / "report.md").read_text()
    assert "hunter2-very-secret" not in stored and REDACTED in stored
    assert json.loads((ws.root / "report.json").read_text())["reason"] == f"leaked {REDACTED}"
