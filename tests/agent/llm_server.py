"""A scripted OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1, in a thread.

It serves POST /v1/chat/completions, non-streaming and SSE streaming, with tool calls,
replaying a list of scripted replies in order. A script entry is a dict:

    {"content": "text", "tool_calls": [{"name": "read_file", "arguments": {...}}]}
    {"status": 429, "error": "slow down"}          # an HTTP error (e.g. a rate limit)

`reply(...)` and `call(...)` build entries. Every request body is kept in `.requests`;
`on_request` (optional) sees each body first.
When the script runs out, the server answers 400 "script exhausted", which ends a run
with a clear LLM error instead of hanging.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self


def call(name: str, /, **arguments: Any) -> dict[str, Any]:
    """A tool call entry for `reply`."""
    return {"name": name, "arguments": arguments}


def reply(content: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    """A scripted assistant reply with optional tool calls."""
    return {"content": content, "tool_calls": list(calls)}


def text_tool_reply(text: str, name: str, /, **arguments: Any) -> dict[str, Any]:
    """An assistant reply using the text tool-call protocol (a fenced ```tool block)."""
    block = json.dumps({"name": name, "arguments": arguments})
    return {"content": f"{text}\n\n```tool\n{block}\n```\n", "tool_calls": []}


class ScriptedLLMServer:
    """Serve `script` to whoever asks. Use as a context manager or call start()/stop()."""

    def __init__(self, script: list[dict[str, Any]], model: str = "scripted",
                 on_request: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.script = list(script)
        self.on_request = on_request  # sees each request body before it is answered
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._served = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def next_entry(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        if self.on_request is not None:
            self.on_request(body)
        with self._lock:
            self.requests.append(body)
            if self._served >= len(self.script):
                return 400, None
            entry = self.script[self._served]
            self._served += 1
        return int(entry.get("status", 200)), entry

    @property
    def remaining(self) -> int:
        return len(self.script) - self._served

    def start(self) -> ScriptedLLMServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tool_calls(entry: dict[str, Any], turn: int) -> list[dict[str, Any]]:
    out = []
    for i, tc in enumerate(entry.get("tool_calls") or []):
        args = tc["arguments"]
        out.append({"id": f"call_{turn}_{i}", "type": "function",
                    "function": {"name": tc["name"],
                                 "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedLLMServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send_json(self, status: int, data: dict[str, Any]) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        status, entry = self.owner.next_entry(body)
        if entry is None:
            self._send_json(400, {"error": {"message": "script exhausted", "type": "invalid_request_error"}})
            return
        if status != 200:
            err_type = "rate_limit_error" if status == 429 else "server_error"
            self._send_json(status, {"error": {"message": entry.get("error", "scripted error"),
                                               "type": err_type, "code": str(status)}})
            return
        turn = len(self.owner.requests)
        content = entry.get("content", "")
        calls = _tool_calls(entry, turn)
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max(1, len(content) // 4),
                 "total_tokens": prompt_tokens + max(1, len(content) // 4)}
        if body.get("stream"):
            self._stream(content, calls, usage, body)
            return
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        self._send_json(200, {
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": int(time.time()),
            "model": self.owner.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage,
        })

    def _stream(self, content: str, calls: list[dict[str, Any]], usage: dict[str, int],
                body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": self.owner.model}

        def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                     **extra}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()

        send({"role": "assistant", "content": ""})
        for i in range(0, len(content), 16):  # several pieces, so streaming is really exercised
            send({"content": content[i:i + 16]})
        for index, tc in enumerate(calls):
            args = tc["function"]["arguments"]
            send({"tool_calls": [{"index": index, "id": tc["id"], "type": "function",
                                  "function": {"name": tc["function"]["name"], "arguments": ""}}]})
            for i in range(0, len(args), 64):
                send({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + 64]}}]})
        send({}, "tool_calls" if calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {**base, "choices": [], "usage": usage}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True
