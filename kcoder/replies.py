"""What a model gives the agent loop: a Reply with its ToolCalls, and the Usage it cost. The
same types for an LLM (agent/llm.py) and for kcoder's built-in policy (policy/driver.py), so
the policy does not borrow them from the LLM wrapper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ToolCall:
    """One tool call from the model. `arguments` is the raw JSON text; `error` is set when the
    call could not even be parsed (the toolbox answers it with an error observation)."""

    id: str
    name: str
    arguments: str
    error: str = ""


@dataclass
class Reply:
    """One assistant turn: its text, its tool calls, and the message to append to history."""

    text: str
    tool_calls: list[ToolCall]
    message: dict[str, Any]


@dataclass
class Usage:
    """Running totals for a run. Cost is 0 for models litellm has no price for (local ones)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    retries: int = 0

    def add(self, other: dict[str, Any]) -> None:
        for key in ("calls", "prompt_tokens", "completion_tokens", "cost", "retries"):
            setattr(self, key, getattr(self, key) + other.get(key, 0))
