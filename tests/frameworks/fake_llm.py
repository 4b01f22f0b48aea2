"""A loopback OpenAI-compatible server whose replies follow a script, for recording real agent
frameworks (tests/frameworks/record.py). Standard library only: the recording driver runs it in
the project's environment, and agent scripts in other environments never import it.

Routes: `POST /v1/chat/completions` (plain and `stream: true`, with `stream_options.include_usage`),
`POST /v1/responses` (plain and streamed events), `GET /v1/models`. Every request is logged with
the server's own clock (`time.time_ns()`, the clock OpenTelemetry's SDK stamps spans with): when
its body was read and when the last byte of the answer was written. That log is half of a
recording's ground truth (truth.py has the other half: tasks and tool bodies).

The script. A task's user message carries a case tag, `[case: NAME]`; the reply is a function of
the case and of how many assistant turns the conversation already holds (so it does not depend on
how a framework words its error messages):

    retry     weather(town=...)  (a wrong argument: the framework or the tool rejects it),
              weather(city=Paris), then the answer
    parallel  weather(city=Paris) and weather(city=Tokyo) in one reply, then the answer
    raises    forecast(city=Lima) (the tool raises the first time), forecast(city=Lima) again,
              then the answer
    delegate  the delegation tool (a sub-agent; its question carries `[case: expert]`), then the
              answer
    expert    (the sub-agent) weather(city=Oslo), then the answer

A request offering a delegation tool (a name with `expert`, `delegate`, `transfer` or `handoff`)
is the main agent's; otherwise the last case tag in the conversation names it. An answer is
plain text, or a call of `final_answer` when the request offers that tool (smolagents). A
conversation with no tag gets a short text answer ("ok"), which frameworks' own warm-up or
title requests receive.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loopback import serving

MODEL_S = 0.04  # the model's time per request
CASE = re.compile(r"\[case: ([a-z_]+)\]")
DELEGATION_WORDS = ("expert", "delegate", "transfer", "handoff")
EXPERT_QUESTION = "[case: expert] What is the weather in Oslo?"
ANSWERS = {
    "retry": "It is sunny in Paris, 21 C.",
    "parallel": "Paris is sunny at 21 C; Tokyo is sunny at 21 C.",
    "raises": "The forecast for Lima: sunny, 21 C.",
    "delegate": "The expert says Oslo is sunny, 21 C.",
    "expert": "Oslo is sunny, 21 C.",
}
# (tool, arguments) per call, one list per reply; the delegation tool's arguments are filled in
# from its schema (`_delegation_arguments`).
DELEGATE = "<delegation>"
SCRIPT: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {
    "retry": [[("weather", {"town": "Paris"})], [("weather", {"city": "Paris"})]],
    "parallel": [[("weather", {"city": "Paris"}), ("weather", {"city": "Tokyo"})]],
    "raises": [[("forecast", {"city": "Lima"})], [("forecast", {"city": "Lima"})]],
    "delegate": [[(DELEGATE, {})]],
    "expert": [[("weather", {"city": "Oslo"})]],
}
CASES = ("retry", "parallel", "raises", "delegate")


# -- the conversation, whatever the API ------------------------------------------------------
@dataclass
class Conversation:
    """What the script reads from a request: the text (for case tags), the assistant turns,
    and the tools offered (name -> JSON schema of the arguments)."""

    items: list[tuple[str, str]] = field(default_factory=list)  # (role, text); role "assistant" opens a turn
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text(p.get("text") or p.get("content") or "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content)


def _tools(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for t in request.get("tools") or []:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t  # chat nests it; responses does not
        if isinstance(fn, dict) and fn.get("name"):
            out[fn["name"]] = fn.get("parameters") or {}
    for fn in request.get("functions") or []:  # the legacy field
        out[fn["name"]] = fn.get("parameters") or {}
    return out


# smolagents keeps no trace of a step whose tool call failed (rejected or raised) but its error,
# merged into the user message before it: each such "Error:" (no "Call id:" line above it, which
# would mean the call was kept) stands for an assistant turn the history leaves out.
SMOLAGENTS_RETRY = "Now let's retry: take care not to repeat previous errors!"


def _implied_turns(role: str, text: str) -> list[tuple[str, str]]:
    if role != "user" or SMOLAGENTS_RETRY not in text:
        return [(role, text)]
    parts = re.split(r"\n(?=Error:\n)", text)
    items = [(role, parts[0])]
    for part in parts[1:]:
        if not items[-1][1].rsplit("\n", 1)[-1].startswith("Call id:"):
            items.append(("assistant", ""))
        items.append((role, part))
    return items


def chat_conversation(request: dict[str, Any]) -> Conversation:
    conv = Conversation(tools=_tools(request))
    for m in request.get("messages") or []:
        role = m.get("role", "")
        calls = " ".join(json.dumps(c) for c in m.get("tool_calls") or [])
        conv.items.extend(_implied_turns(role, f"{_text(m.get('content'))} {calls}".strip()))
    return conv


def responses_conversation(request: dict[str, Any]) -> Conversation:
    conv = Conversation(tools=_tools(request))
    if request.get("instructions"):
        conv.items.append(("system", _text(request["instructions"])))
    items = request.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    previous = ""
    for it in items or []:
        kind = it.get("type") or "message"
        if kind == "function_call":
            role = "assistant" if previous != "call" else "assistant+"  # one turn per run of calls
            conv.items.append((role, json.dumps(it)))
            previous = "call"
            continue
        if kind == "function_call_output":
            conv.items.append(("tool", _text(it.get("output"))))
        elif kind == "message":
            conv.items.append((it.get("role", "user"), _text(it.get("content"))))
        previous = kind
    return conv


def _offers_delegation(conv: Conversation) -> str | None:
    return next((n for n in conv.tools if any(w in n.lower() for w in DELEGATION_WORDS)), None)


def case_and_turn(conv: Conversation) -> tuple[str | None, int]:
    """The script case this request belongs to and its assistant turns so far (module docstring)."""
    tagged = [(i, m.group(1)) for i, (_, text) in enumerate(conv.items) for m in CASE.finditer(text)]
    if not tagged:
        return None, 0
    if _offers_delegation(conv):
        case = next((c for _, c in tagged if c != "expert"), tagged[0][1])
        start = next(i for i, c in tagged if c == case)
    else:
        start, case = tagged[-1]
    # turns after the item holding the tag: a sub-agent handed the whole history counts its own
    return case, sum(role == "assistant" for role, _ in conv.items[start + 1:])


def _delegation_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A question for every string argument the delegation tool takes (an enum's first value)."""
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    for name, spec in props.items():
        if not isinstance(spec, dict):
            continue
        if spec.get("enum"):
            args[name] = spec["enum"][0]
        elif spec.get("type") in ("string", None) or "anyOf" in spec:
            args[name] = EXPERT_QUESTION
    return args or {"question": EXPERT_QUESTION}


@dataclass
class Reply:
    """One scripted reply: tool calls (name, arguments JSON) or text."""

    case: str | None
    turn: int
    calls: list[tuple[str, str]]
    text: str | None

    @property
    def kind(self) -> str:
        if not self.calls:
            return "answer"
        return "final_answer" if self.calls[0][0] == "final_answer" else "calls"


def reply_for(conv: Conversation) -> Reply:
    case, turn = case_and_turn(conv)
    if case is None:
        return Reply(None, 0, [], "ok")
    script = SCRIPT.get(case, [])
    if turn < len(script):
        calls = []
        for name, args in script[turn]:
            if name == DELEGATE:
                name = _offers_delegation(conv) or "ask_expert"
                args = _delegation_arguments(conv.tools.get(name, {}))
            calls.append((name, json.dumps(args)))
        return Reply(case, turn, calls, None)
    answer = ANSWERS.get(case, "done")
    if "final_answer" in conv.tools:
        return Reply(case, turn, [("final_answer", json.dumps({"answer": answer}))], None)
    return Reply(case, turn, [], answer)


# -- rendering ---------------------------------------------------------------------------------
def _usage(conv: Conversation, reply: Reply) -> tuple[int, int]:
    return 20 + 10 * len(conv.items), 8 * max(1, len(reply.calls)) if reply.calls else 12


def chat_message(reply: Reply, ids: Iterator[int]) -> tuple[dict[str, Any], str]:
    if not reply.calls:
        return {"role": "assistant", "content": reply.text}, "stop"
    calls = [{"id": f"call_{next(ids)}", "type": "function", "function": {"name": n, "arguments": a}} for n, a in reply.calls]
    return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"


def chat_chunks(reply: Reply, base: dict[str, Any], ids: Iterator[int]) -> list[dict[str, Any]]:
    """The stream of a chat completion: the role, the content or each call (name, then its
    arguments in two pieces), the finish reason."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": "" if not reply.calls else None})]
    if not reply.calls:
        text = reply.text or ""
        cut = max(1, len(text) // 2)
        out += [chunk({"content": text[:cut]}), chunk({"content": text[cut:]})]
        return [*out, chunk({}, "stop")]
    for i, (name, args) in enumerate(reply.calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{next(ids)}", "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        cut = len(args) // 2
        for piece in (args[:cut], args[cut:]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    return [*out, chunk({}, "tool_calls")]


def responses_output(reply: Reply, ids: Iterator[int]) -> list[dict[str, Any]]:
    if not reply.calls:
        return [{"type": "message", "id": f"msg_{next(ids)}", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}]}]
    out = []
    for name, args in reply.calls:
        n = next(ids)
        out.append({"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name, "arguments": args,
                    "status": "completed"})
    return out


def responses_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The event stream of one Responses API answer, ending in `response.completed`."""
    seq = itertools.count()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": pending},
                                    {"type": "response.in_progress", "response": pending}]
    for i, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append({"type": "response.output_item.added", "output_index": i,
                           "item": {**item, "status": "in_progress", "content": []}})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append({"type": "response.content_part.added", "item_id": item["id"], "output_index": i, "content_index": 0, "part": part})
            cut = max(1, len(text) // 2)
            for piece in (text[:cut], text[cut:]):
                events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                               "content_index": 0, "delta": piece, "logprobs": []})
            events.append({"type": "response.output_text.done", "item_id": item["id"], "output_index": i,
                           "content_index": 0, "text": text, "logprobs": []})
            events.append({"type": "response.content_part.done", "item_id": item["id"], "output_index": i,
                           "content_index": 0, "part": item["content"][0]})
        else:
            events.append({"type": "response.output_item.added", "output_index": i,
                           "item": {**item, "status": "in_progress", "arguments": ""}})
            args = item["arguments"]
            cut = len(args) // 2
            for piece in (args[:cut], args[cut:]):
                events.append({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": i,
                               "delta": piece})
            events.append({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": i,
                           "arguments": args, "name": item["name"]})
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    events.append({"type": "response.completed", "response": response})
    return [{**e, "sequence_number": next(seq)} for e in events]


# -- the server --------------------------------------------------------------------------------
@dataclass
class Logged:
    """One request as the server saw it (the recording's model-call truth)."""

    api: str  # chat | responses
    stream: bool
    case: str | None
    turn: int
    agent: str  # main | expert | none
    kind: str  # calls | answer | final_answer
    calls: list[tuple[str, str]]
    received_ns: int
    done_ns: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go apart: without this, kept-alive requests wait ~40 ms
    server: FakeLLM

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "fake"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        received = time.time_ns()
        path = self.path.split("?")[0].rstrip("/")
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        if path.endswith("/chat/completions"):
            api, conv = "chat", chat_conversation(request)
        elif path.endswith("/responses"):
            api, conv = "responses", responses_conversation(request)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        reply = reply_for(conv)
        stream = bool(request.get("stream"))
        agent = "none" if reply.case is None else ("expert" if reply.case == "expert" else "main")
        entry = Logged(api, stream, reply.case, reply.turn, agent, reply.kind, reply.calls, received)
        model = request.get("model") or "gpt-4o-mini"
        delay = self.server.model_s if reply.case is not None else 0.0
        if api == "chat":
            self._chat(request, conv, reply, model, stream, delay)
        else:
            self._responses(request, conv, reply, model, stream, delay)
        entry.done_ns = time.time_ns()
        with self.server.lock:
            self.server.log.append(entry)

    def _chat(self, request: dict[str, Any], conv: Conversation, reply: Reply, model: str, stream: bool, delay: float) -> None:
        ids = self.server.ids
        prompt, completion = _usage(conv, reply)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        base = {"id": f"chatcmpl-{next(ids)}", "created": int(time.time()), "model": model, "system_fingerprint": "fake"}
        if not stream:
            time.sleep(delay)
            message, finish = chat_message(reply, ids)
            self._json(200, {**base, "object": "chat.completion", "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]})
            return
        chunks = chat_chunks(reply, base, ids)
        if (request.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        self._sse(["data: " + json.dumps(c) for c in chunks] + ["data: [DONE]"], delay)

    def _responses(self, request: dict[str, Any], conv: Conversation, reply: Reply, model: str, stream: bool, delay: float) -> None:
        ids = self.server.ids
        prompt, completion = _usage(conv, reply)
        response = {
            "id": f"resp_{next(ids)}", "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": model, "output": responses_output(reply, ids), "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": request.get("tools") or [], "temperature": 1.0, "top_p": 1.0, "error": None, "incomplete_details": None,
            "instructions": request.get("instructions"), "metadata": {}, "text": {"format": {"type": "text"}},
            "truncation": "disabled", "previous_response_id": request.get("previous_response_id"),
            "usage": {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        }
        if not stream:
            time.sleep(delay)
            self._json(200, response)
            return
        self._sse([f"event: {e['type']}\ndata: {json.dumps(e)}" for e in responses_events(response)], delay)

    def _sse(self, events: list[str], delay: float) -> None:
        """Server-sent events: the first after half the model's time, the rest spread over the
        other half, as a model streams its tokens."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the stream ends with the connection: no length needed
        self.end_headers()
        time.sleep(delay / 2)
        gap = delay / 2 / max(1, len(events) - 1)
        for i, e in enumerate(events):
            if i:
                time.sleep(gap)
            self.wfile.write((e + "\n\n").encode())
            self.wfile.flush()
        self.close_connection = True


class FakeLLM(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model_s: float = MODEL_S) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model_s = model_s
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.log: list[Logged] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that drops a kept-alive connection is no error of the run

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1"


def running(model_s: float = MODEL_S) -> contextlib.AbstractContextManager[FakeLLM]:
    """A running server (its base URL: `server.base_url`), stopped on exit."""
    return serving(FakeLLM(model_s))
