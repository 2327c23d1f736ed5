"""Model access through litellm only (imported lazily): streaming, tool calls, retries, usage.

Two tool-call protocols:
- native: the API's own tool calls (`tools=[...]` in the request, `tool_calls` in the reply);
- text: the model writes a fenced block ```tool {"name": ..., "arguments": {...}} ``` (or a
  Hermes-style <tool_call>{...}</tool_call>, which many local models emit when the server has
  no tool parser). Observations then go back as user messages.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from kcoder.replies import Reply, ToolCall, Usage

TextCallback = Callable[[str], None]

# ```tool / ```tool_call / ```json fences; the closing fence must start a line, so "```"
# inside a (single-line) JSON string cannot end the block early.
_FENCE = re.compile(r"^```(tool_call|tool|json)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class LLMError(Exception):
    """A fatal model-access error; str() is one line for the user. Ends the run."""


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[:limit] + "…"


def _transient(litellm: Any, exc: BaseException) -> bool:
    """Worth retrying: rate limits, timeouts, lost connections, 5xx from servers and gateways."""
    if isinstance(exc, (litellm.RateLimitError, litellm.APIConnectionError, litellm.Timeout,
                        litellm.ServiceUnavailableError, litellm.InternalServerError)):
        return True
    if isinstance(exc, (litellm.AuthenticationError, litellm.ContextWindowExceededError,
                        litellm.BadRequestError, litellm.NotFoundError, litellm.PermissionDeniedError)):
        return False
    return isinstance(exc, litellm.APIError) and (getattr(exc, "status_code", 0) or 0) >= 500


def shorten_arguments(arguments: Any, keep: int, shorten: Callable[[str], Any]) -> dict[str, Any] | str:
    """A tool call's arguments with every string value passed through `shorten` (which keeps
    short ones and replaces long ones, e.g. whole files); arguments that are not a JSON object
    come back as their text cut to `keep` characters."""
    try:
        args = json.loads(arguments, strict=False) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return str(arguments)[:keep]
    if not isinstance(args, dict):
        return str(arguments)[:keep]
    return {k: shorten(v) if isinstance(v, str) else v for k, v in args.items()}


def _litellm() -> Any:
    """Import litellm (slow, so only when a run starts) and quiet its banners."""
    import litellm

    # Its "Provider List / Give Feedback" banners would interleave with kcoder's own output.
    litellm.suppress_debug_info = True
    return litellm


def missing_key_message(model: str, api_base: str | None) -> str | None:
    """One line naming the environment variable to set, or None when nothing is missing.

    A local server (api_base given) needs no key.
    """
    if api_base:
        return None
    litellm = _litellm()
    try:
        info = litellm.validate_environment(model=model)
    except Exception:  # noqa: BLE001 - unknown providers: let the first request say what is wrong
        return None
    missing = info.get("missing_keys") or []
    if info.get("keys_in_environment") or not missing:
        return None
    return (f"{model} needs an API key: set {' or '.join(missing)} "
            "(or serve a model locally and pass --api-base)")


def parse_text_tool_calls(text: str) -> list[ToolCall]:
    """Tool calls written in the text protocol. Unparseable blocks become calls with `error`."""
    blocks = [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]
    blocks += [("tool_call", m.group(1)) for m in _HERMES.finditer(text)]
    calls: list[ToolCall] = []
    for n, (kind, body) in enumerate(blocks, 1):
        call_id = f"text-{n}"
        try:
            # strict=False: models often put raw newlines (code) inside JSON strings.
            data = json.loads(body, strict=False)
        except json.JSONDecodeError as exc:
            if kind == "json":
                continue  # an ordinary JSON example in prose, not a tool call
            calls.append(ToolCall(call_id, "", body, error=f"the tool block is not valid JSON ({exc})"))
            continue
        if not isinstance(data, dict) or "name" not in data:
            if kind != "json":
                calls.append(ToolCall(call_id, "", body,
                                      error='a tool block needs {"name": ..., "arguments": {...}}'))
            continue
        args = data.get("arguments", data.get("parameters", {}))
        raw = args if isinstance(args, str) else json.dumps(args)
        calls.append(ToolCall(call_id, str(data["name"]), raw))
    return calls


@dataclass
class LLM:
    """A chat model reached through litellm.

    `on_text` receives assistant text as it streams; `on_notice` gets one-line notices
    (retries). Transient errors are retried `max_retries` times, waiting `backoff_s` doubling
    up to `max_backoff_s`; `sleep` is injectable so tests do not wait through backoff.
    """

    model: str
    api_base: str | None = None
    api_key: str | None = None
    tool_mode: str = "native"
    temperature: float | None = None
    max_output_tokens: int | None = None
    stream: bool = True
    on_text: TextCallback | None = None
    on_notice: TextCallback | None = None
    max_retries: int = 6
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    timeout_s: float = 600.0
    sleep: Callable[[float], None] = time.sleep
    usage: Usage = field(default_factory=Usage)

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        """Send the conversation; return the reply. Retries transient errors with exponential
        backoff; raises LLMError (one line) for errors that retrying cannot fix."""
        litellm = _litellm()
        retrying = Retrying(
            retry=retry_if_exception(lambda exc: _transient(litellm, exc)),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
            sleep=self.sleep, before_sleep=self._before_retry, reraise=True)
        try:
            return retrying(self._once, litellm, messages, tools)
        except Exception as exc:
            fatal = self._fatal(litellm, exc, retrying.statistics.get("attempt_number", 1))
            if fatal is None:
                raise
            raise fatal from exc

    def _before_retry(self, state: RetryCallState) -> None:
        self.usage.retries += 1
        if self.on_notice and state.outcome is not None and state.next_action is not None:
            self.on_notice(f"{type(state.outcome.exception()).__name__}: retrying in "
                           f"{state.next_action.sleep:.0f} s (attempt {state.attempt_number + 1}/"
                           f"{self.max_retries + 1})")

    def _fatal(self, litellm: Any, exc: Exception, attempts: int) -> LLMError | None:
        """The one-line LLMError for a failed request, or None for errors that are not the
        model service's (they propagate unchanged)."""
        if _transient(litellm, exc):
            return LLMError(f"{self.model}: gave up after {attempts} attempts: {_one_line(exc)}")
        if isinstance(exc, litellm.AuthenticationError):
            return LLMError(f"{self.model}: authentication failed ({_one_line(exc)}); check the API key")
        if isinstance(exc, litellm.ContextWindowExceededError):
            return LLMError(f"{self.model}: the conversation no longer fits the context window "
                            f"({_one_line(exc)})")
        if isinstance(exc, (litellm.BadRequestError, litellm.NotFoundError, litellm.PermissionDeniedError)):
            return LLMError(f"{self.model}: request refused: {_one_line(exc)}")
        if isinstance(exc, litellm.APIError):
            return LLMError(f"{self.model}: {_one_line(exc)}")
        return None

    def _request_kwargs(self, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": messages, "timeout": self.timeout_s,
            # The client's own retries are off: they would hide a 429 from kcoder's backoff.
            "num_retries": 0, "max_retries": 0, "drop_params": True,
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
            # openai-compatible local servers often need no key, but the client insists on one.
            kwargs["api_key"] = self.api_key or os.environ.get("KCODER_API_KEY") or "EMPTY"
        elif self.api_key:
            kwargs["api_key"] = self.api_key
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_output_tokens:
            kwargs["max_tokens"] = self.max_output_tokens
        if self.tool_mode == "native" and tools:
            kwargs["tools"] = tools
        if self.stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    def _once(self, litellm: Any, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]]) -> Reply:
        kwargs = self._request_kwargs(messages, tools)
        if self.stream:
            chunks = []
            for chunk in litellm.completion(**kwargs):
                chunks.append(chunk)
                delta = chunk.choices[0].delta if chunk.choices else None
                if delta is not None and getattr(delta, "content", None) and self.on_text:
                    self.on_text(delta.content)
            response = litellm.stream_chunk_builder(chunks, messages=messages)
            if response is None:
                raise LLMError(f"{self.model}: the server sent an empty stream")
        else:
            response = litellm.completion(**kwargs)
            text = response.choices[0].message.content or ""
            if text and self.on_text:
                self.on_text(text)
        self._count(litellm, response)
        return self._to_reply(response)

    def _count(self, litellm: Any, response: Any) -> None:
        usage = getattr(response, "usage", None)
        self.usage.calls += 1
        self.usage.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        self.usage.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        try:
            cost = float(litellm.completion_cost(completion_response=response,
                                                 model=self.model) or 0.0)
        except Exception:  # noqa: BLE001 - no price known (local models): counts as zero
            cost = 0.0
        self.usage.cost += cost

    def _to_reply(self, response: Any) -> Reply:
        msg = response.choices[0].message
        text = msg.content or ""
        calls: list[ToolCall] = []
        for n, tc in enumerate(getattr(msg, "tool_calls", None) or [], 1):
            fn = tc.function
            calls.append(ToolCall(tc.id or f"call-{n}", fn.name or "", fn.arguments or "{}"))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls and self.tool_mode == "native":
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        if not calls:
            # Also in native mode: a server without a tool parser returns the call as text.
            # The loop answers these as user messages (the message carries no tool_calls).
            calls = parse_text_tool_calls(text)
        return Reply(text=text, tool_calls=calls, message=message)
