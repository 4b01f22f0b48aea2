"""A small OpenAI-compatible server on loopback for the tests that trace the real `openai`
client: `POST /v1/chat/completions` (not streamed), with replies scripted from the conversation
and a fixed time per request, so two runs of one agent loop take the same time.

The script is the agent loop of tests/foreign_loop.py: the first reply calls `weather` with a
wrong argument (`town`), the reply after a tool error calls it right (`city`), the reply after a
tool result answers in text. A conversation whose last user message is "warm up" gets "ok" at
once (the client's first request pays for lazy imports; the loops make it before tracing).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loopback import serving

WARM_UP = "warm up"
ANSWER = "It is sunny in Paris, 21 C."


def reply_for(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """(message, finish reason) for a conversation, by the script in the module docstring."""
    users = [m for m in messages if m.get("role") == "user"]
    if users and users[-1].get("content") == WARM_UP:
        return {"role": "assistant", "content": "ok"}, "stop"
    tools = [m for m in messages if m.get("role") == "tool"]
    if tools and not str(tools[-1].get("content", "")).lower().startswith("error"):
        return {"role": "assistant", "content": ANSWER}, "stop"
    args = {"city": "Paris"} if tools else {"town": "Paris"}
    call = {"id": f"call_{len(tools) + 1}", "type": "function", "function": {"name": "weather", "arguments": json.dumps(args)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are written apart; with Nagle's algorithm and the client's delayed ACK
    # every request after the first on a kept-alive connection would wait ~40 ms more.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        request = json.loads(raw or b"{}")
        messages = request.get("messages") or []
        message, finish = reply_for(messages)
        self.server.traceparents.append(self.headers.get("traceparent"))
        if message.get("content") != "ok":
            time.sleep(self.server.delay_s)
        prompt = 10 + 5 * len(messages)
        completion = 7 if finish == "tool_calls" else 9
        self._send(200, {
            "id": f"chatcmpl-{next(self.server.ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": f"{request.get('model', 'test-model')}-2026-01-01",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        })


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, delay_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay_s = delay_s
        self.ids = itertools.count(1)
        self.traceparents: list[str | None] = []


def fake_openai(delay_s: float = 0.04) -> contextlib.AbstractContextManager[_Server]:
    """A running server; its base URL is `f"http://127.0.0.1:{server.server_port}/v1"`."""
    return serving(_Server(delay_s))


def base_url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_port}/v1"
