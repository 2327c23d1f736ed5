"""Model access through the real litellm client against the scripted local server."""

from __future__ import annotations

import json

import pytest

from kcoder.agent.llm import LLM, LLMError, missing_key_message, parse_text_tool_calls

from .llm_server import call, reply, text_tool_reply


def _llm(server, **kw) -> LLM:
    kw.setdefault("sleep", lambda s: None)
    return LLM("openai/scripted", api_base=server.base_url, api_key="test", **kw)


MESSAGES = [{"role": "user", "content": "optimize this"}]
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "read",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize("stream", [True, False])
def test_native_tool_call_and_text(scripted, stream):
    content = "I will read the reference first, then plan the kernel."
    server = scripted([reply(content, call("read_file", path="model.py"))])
    streamed: list[str] = []
    llm = _llm(server, stream=stream, on_text=streamed.append)
    out = llm.query(MESSAGES, TOOLS)
    assert out.text == content
    assert "".join(streamed) == content
    if stream:
        assert len(streamed) > 1  # really arrived in pieces
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [
        ("read_file", {"path": "model.py"})]
    assert out.message["tool_calls"][0]["function"]["name"] == "read_file"
    assert server.requests[0]["tools"][0]["function"]["name"] == "read_file"
    assert llm.usage.calls == 1 and llm.usage.completion_tokens > 0
    assert llm.usage.cost == 0.0  # a local model has no price: zero, not an error


def test_rate_limit_is_retried_with_backoff(scripted):
    server = scripted([{"status": 429, "error": "slow down"},
                       reply("ok", call("finish"))])
    sleeps: list[float] = []
    notices: list[str] = []
    llm = _llm(server, sleep=sleeps.append, on_notice=notices.append, backoff_s=1.5)
    out = llm.query(MESSAGES, TOOLS)
    assert out.tool_calls[0].name == "finish"
    assert len(server.requests) == 2  # exactly one retry: the client's own retries are off
    assert sleeps == [1.5] and llm.usage.retries == 1
    assert "RateLimitError" in notices[0]


def test_backoff_grows_and_gives_up(scripted):
    server = scripted([{"status": 503, "error": "busy"}] * 3)
    sleeps: list[float] = []
    llm = _llm(server, sleep=sleeps.append, max_retries=2, backoff_s=1.0)
    with pytest.raises(LLMError, match="gave up after 3 attempts"):
        llm.query(MESSAGES, TOOLS)
    assert sleeps == [1.0, 2.0]


@pytest.mark.parametrize(("status", "error", "match"), [
    (401, "invalid api key", "authentication failed"),
    (400, "This model's maximum context length is 8192 tokens. However, you requested 9000",
     "context window"),
    (400, "unsupported parameter", "request refused"),
])
def test_fatal_errors_are_not_retried(scripted, status, error, match):
    server = scripted([{"status": status, "error": error}, reply("never")])
    llm = _llm(server)
    with pytest.raises(LLMError, match=match) as info:
        llm.query(MESSAGES, TOOLS)
    assert len(server.requests) == 1
    assert "\n" not in str(info.value)  # one line for the user


def test_text_protocol_through_server(scripted):
    server = scripted([text_tool_reply("Reading.", "read_file", path="model.py")])
    llm = _llm(server, tool_mode="text")
    out = llm.query(MESSAGES, TOOLS)
    assert "tools" not in server.requests[0]  # text mode sends no tool declarations
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [
        ("read_file", {"path": "model.py"})]
    assert "tool_calls" not in out.message


def test_parse_text_tool_calls_variants():
    text = (
        "Plan first.\n```json\n{\"not\": \"a call\"}\n```\n"
        "```tool\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.py\", "
        "\"content\": \"x = 1\ny = '```'\"}}\n```\n"
        "<tool_call>{\"name\": \"compile\", \"arguments\": {}}</tool_call>"
    )
    calls = parse_text_tool_calls(text)
    assert [c.name for c in calls] == ["write_file", "compile"]
    # Raw newlines inside the JSON string are tolerated (models write code that way).
    assert json.loads(calls[0].arguments)["content"] == "x = 1\ny = '```'"


def test_parse_text_tool_call_bad_json_becomes_error():
    calls = parse_text_tool_calls("```tool\n{\"name\": \"compile\", \"arguments\": {\n```\n")
    assert len(calls) == 1 and "not valid JSON" in calls[0].error
    assert parse_text_tool_calls("no tool here") == []


def test_missing_api_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    msg = missing_key_message("anthropic/claude-sonnet-4-5", None)
    assert msg is not None and "ANTHROPIC_API_KEY" in msg and "\n" not in msg
    assert "OPENAI_API_KEY" in (missing_key_message("openai/gpt-4o", None) or "")
    assert missing_key_message("openai/whatever", "http://127.0.0.1:8000/v1") is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert missing_key_message("anthropic/claude-sonnet-4-5", None) is None
