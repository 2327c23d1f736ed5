"""Secrets never reach an artifact: values of secret-looking environment variables are cut
out of any text kcoder stores or shows (verdicts, logs, trajectories, reports, commits)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

# Names that hold credentials: *_KEY, *_TOKEN, *_SECRET, passwords, cloud credentials.
SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)|^(AWS|AZURE|GCP|GOOGLE|HF|HUGGING)_",
    re.IGNORECASE)
MIN_SECRET_CHARS = 6  # shorter values ("1", "yes") would redact ordinary words
REDACTED = "[redacted]"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    return bool(SECRET_NAME.search(name))


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret-looking variables of `env` (default: this process), longest first."""
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    """`text` with every secret value replaced by [redacted]."""
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact_data(data: Any, secrets: list[str] | None = None) -> Any:
    """A copy of JSON-like `data` (dicts, lists, strings) with secrets redacted in every string."""
    secrets = secret_values() if secrets is None else secrets
    if not secrets:
        return data
    if isinstance(data, str):
        return redact(data, secrets)
    if isinstance(data, dict):
        return {k: redact_data(v, secrets) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(redact_data(v, secrets) for v in data)
    return data
