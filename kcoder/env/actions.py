"""A KernelEnv action as the agent loop's Reply: what the model would have answered.

An action is one of
- a tool call: {"name": "write_file", "arguments": {...}} (arguments as an object or JSON text);
- an assistant message in the OpenAI chat format: {"role": "assistant", "content": ...,
  "tool_calls": [...]} (what an LLM client returns; several calls run in order);
- the assistant's text: a str, whose fenced ```tool blocks (the text protocol) are its calls.
Anything else becomes a call with an error, which the toolbox answers with an error
observation: a malformed action costs a turn, never a crash.
"""

from __future__ import annotations

import json
from typing import Any

from kcoder.agent.llm import Reply, ToolCall, parse_text_tool_calls

ACTION_HELP = ('an action is a tool call {"name": ..., "arguments": {...}}, an assistant message '
               '{"role": "assistant", "content": ..., "tool_calls": [...]}, or the assistant\'s text')


def to_reply(action: Any, turn: int) -> Reply:
    """The Reply the loop executes for `action` (`turn` numbers the ids of its calls)."""
    if isinstance(action, str):
        return Reply(action, parse_text_tool_calls(action), {"role": "assistant", "content": action})
    if isinstance(action, dict) and action.get("role") == "assistant":
        return _from_message(action, turn)
    if isinstance(action, dict) and "name" in action:
        return _from_calls("", [action], turn)
    return _malformed(action, turn, ACTION_HELP)


def _from_message(message: dict[str, Any], turn: int) -> Reply:
    text = message.get("content") or ""
    if not isinstance(text, str):
        return _malformed(message, turn, "an assistant message's content must be text")
    calls = message.get("tool_calls")
    if not calls:
        return to_reply(text, turn)
    if not isinstance(calls, list):
        return _malformed(message, turn, "tool_calls must be a list")
    return _from_calls(text, [c.get("function", c) if isinstance(c, dict) else c for c in calls], turn,
                       ids=[c.get("id") if isinstance(c, dict) else None for c in calls])


def _from_calls(text: str, calls: list[Any], turn: int, ids: list[Any] | None = None) -> Reply:
    """A native-protocol reply: one ToolCall per call, each id unique in the episode."""
    parsed: list[ToolCall] = []
    for n, call in enumerate(calls, 1):
        call_id = (ids[n - 1] if ids else None) or f"env-{turn}-{n}"
        parsed.append(_tool_call(call, str(call_id)))
    if any(c.error for c in parsed):
        bad = next(c for c in parsed if c.error)
        return Reply(text, [bad], {"role": "assistant", "content": text or json.dumps(calls, default=str)})
    message = {"role": "assistant", "content": text, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in parsed]}
    return Reply(text, parsed, message)


def _tool_call(call: Any, call_id: str) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall(call_id, "", json.dumps(call, default=str), error='a tool call needs a "name" (text)')
    args = call.get("arguments", {})
    if isinstance(args, str):
        return ToolCall(call_id, call["name"], args)  # the toolbox parses and checks it
    if not isinstance(args, dict):
        return ToolCall(call_id, call["name"], json.dumps(args, default=str),
                        error='"arguments" must be an object (or its JSON text)')
    return ToolCall(call_id, call["name"], json.dumps(args))


def _malformed(action: Any, turn: int, why: str) -> Reply:
    shown = action if isinstance(action, str) else json.dumps(action, default=str)[:2000]
    return Reply(shown, [ToolCall(f"env-{turn}-1", "", shown, error=why)],
                 {"role": "assistant", "content": shown})
