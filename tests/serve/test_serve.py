"""`agenttrace serve` end to end: the real `openai` client, wrapped, over real HTTP (loopback, a
free port) to our server on the bundled model; streaming, tools, errors, one joined trace."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

import agenttrace as at  # noqa: E402
from agenttrace import MonotonicClock  # noqa: E402
from agenttrace import semconv as sc  # noqa: E402
from agenttrace.serve.server import BackgroundServer, build_engine  # noqa: E402
from agenttrace.testing import capture_telemetry, spans_by_name  # noqa: E402

pytestmark = pytest.mark.model

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Current weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
# A conversation that shows the small model one earlier tool call, so it copies the format.
WITH_HISTORY = [
    {"role": "user", "content": "What's the weather in Rome?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Rome", "condition": "sunny"}'},
    {"role": "assistant", "content": "It is sunny in Rome."},
    {"role": "user", "content": "What's the weather in Paris?"},
]


@pytest.fixture(scope="module")
def server(bundled):
    server_tel, server_spans = capture_telemetry(MonotonicClock())
    engine = build_engine(bundled, server_tel)
    with BackgroundServer(engine) as srv:
        yield srv, server_spans
    server_tel.shutdown()


@pytest.fixture
def client(server):
    srv, server_spans = server
    server_spans.clear()
    tel, spans = capture_telemetry(MonotonicClock())
    raw = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=60)
    return at.wrap_openai(raw, telemetry=tel), spans, server_spans, srv.engine.model_name


def test_a_completion_and_one_trace_across_client_and_server(client):
    wrapped, spans, server_spans, model = client
    reply = wrapped.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12)
    assert reply.choices[0].message.content and reply.usage.completion_tokens <= 12
    assert reply.choices[0].finish_reason in ("stop", "length")
    (gen,) = spans.get_finished_spans()
    assert gen.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == reply.usage.completion_tokens
    assert gen.attributes[sc.GEN_AI_RESPONSE_MODEL] == model
    served = spans_by_name(server_spans.get_finished_spans())[f"chat {model}"][0]
    assert served.context.trace_id == gen.context.trace_id and served.parent.span_id == gen.context.span_id
    assert served.attributes[sc.SPEC_METHOD] == "prompt_lookup"
    assert served.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == reply.usage.prompt_tokens


def test_streaming_sends_tokens_as_they_are_generated(client):
    wrapped, spans, server_spans, model = client
    messages = [{"role": "user", "content": "Count from one to five."}]
    arrivals, pieces = [], []
    started = time.perf_counter()
    for c in wrapped.chat.completions.create(model=model, messages=messages, max_tokens=24, stream=True):
        if c.choices and c.choices[0].delta.content:
            arrivals.append(time.perf_counter() - started)
            pieces.append(c.choices[0].delta.content)
    whole = wrapped.chat.completions.create(model=model, messages=messages, max_tokens=24)
    assert "".join(pieces) == whole.choices[0].message.content  # greedy: the same text either way
    assert len(pieces) >= 4 and arrivals[0] < arrivals[-1]
    streamed = spans.get_finished_spans()[0]
    ttft = streamed.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert 0 < ttft < (streamed.end_time - streamed.start_time) / 1e9
    assert streamed.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == whole.usage.completion_tokens


def test_tools_become_tool_calls_streamed_or_not(client):
    wrapped, spans, server_spans, model = client
    reply = wrapped.chat.completions.create(model=model, messages=WITH_HISTORY, tools=TOOLS, max_tokens=32)
    (call,) = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "weather"
    assert json.loads(call.function.arguments)["city"] == "Paris"
    stream = wrapped.chat.completions.create(model=model, messages=WITH_HISTORY, tools=TOOLS, max_tokens=32, stream=True)
    for _ in stream:
        pass
    assert stream.finish_reasons == ["tool_calls"] and stream.tool_calls[0]["function"] == call.function.model_dump()
    (check,) = at.validate_tool_calls(stream, tools=TOOLS, telemetry=wrapped._settings.telemetry)
    assert check.ok and check.arguments["city"] == "Paris"
    gen = spans_by_name(spans.get_finished_spans())[f"chat {model}"][1]
    assert gen.attributes[sc.RESPONSE_TOOL_NAMES] == ("weather",) and gen.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
    served = spans_by_name(server_spans.get_finished_spans())
    assert [s.attributes[sc.PARSE_RESULT] for s in served["parse_tool_call"]] == ["tool_call", "tool_call"]


def test_tool_choice_required_and_a_json_schema_are_decoded_under_their_grammar(client):
    wrapped, spans, server_spans, model = client
    ask = [{"role": "user", "content": "Tell me about the weather in Oslo."}]
    reply = wrapped.chat.completions.create(model=model, messages=ask, tools=TOOLS, tool_choice="required", max_tokens=32)
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "weather" and isinstance(json.loads(call.function.arguments)["city"], str)
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "warm": {"type": "boolean"}},
              "required": ["city", "warm"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": schema}}
    reply = wrapped.chat.completions.create(model=model, messages=ask, response_format=fmt, max_tokens=40)
    doc = json.loads(reply.choices[0].message.content)
    assert set(doc) == {"city", "warm"} and isinstance(doc["warm"], bool)
    served = spans_by_name(server_spans.get_finished_spans())[f"chat {model}"]
    assert [s.attributes[sc.CONSTRAIN_GRAMMAR] for s in served] == ["tool_call_json", "response_format_json_schema"]
    assert all(s.attributes[sc.CONSTRAIN_ENGINE] == "llguidance" and s.attributes[sc.CONSTRAIN_MASK_S] > 0 for s in served)
    # an unconstrained request stays unconstrained
    wrapped.chat.completions.create(model=model, messages=ask, max_tokens=4)
    assert sc.CONSTRAIN_ENGINE not in spans_by_name(server_spans.get_finished_spans())[f"chat {model}"][-1].attributes


def test_request_constraints_follow_tool_choice_and_response_format():
    from agenttrace.serve.protocol import ChatRequest, request_constraint, request_tools

    def constraint(auto=False, **extra):
        req = ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra})
        return request_constraint(req, request_tools(req), 64, constrain_auto=auto)

    assert constraint() is None and constraint(tools=TOOLS) is None and constraint(tools=TOOLS, tool_choice="auto") is None
    auto = json.loads(constraint(True, tools=TOOLS, tool_choice="auto").source)  # a server run with --constrained
    assert len(auto["anyOf"]) == 2 and "answer" in auto["anyOf"][1]["properties"]
    assert constraint(True, tools=TOOLS, tool_choice="none") is None
    required = json.loads(constraint(tools=TOOLS, tool_choice="required").source)
    assert [alt["properties"]["tool"]["const"] for alt in required["anyOf"]] == ["weather"]  # no answer allowed
    named = constraint(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "weather"}})
    assert json.loads(named.source) == required
    assert constraint(response_format={"type": "json_object"}).name == "response_format_json_object"
    assert constraint(response_format={"type": "text"}) is None
    from agenttrace.errors import RequestError

    with pytest.raises(RequestError, match="must be a JSON schema object"):
        constraint(response_format={"type": "json_schema", "json_schema": {"name": "x"}})


def test_bad_requests_get_openai_errors(client):
    wrapped, spans, server_spans, model = client
    with pytest.raises(openai.NotFoundError, match="is not served here"):
        wrapped.chat.completions.create(model="gpt-nothing", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="messages"):
        wrapped.chat.completions.create(model=model, messages=[])
    failed = spans.get_finished_spans()
    assert [s.attributes[sc.ERROR_TYPE] for s in failed] == ["NotFoundError", "BadRequestError"]


def test_the_async_client_streams_too(server):
    srv, _ = server
    tel, spans = capture_telemetry(MonotonicClock())
    wrapped = at.wrap_openai(openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0), telemetry=tel)

    async def main():
        stream = await wrapped.chat.completions.create(
            model=srv.engine.model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, stream=True
        )
        return [c async for c in stream]

    chunks = asyncio.run(main())
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    (gen,) = spans.get_finished_spans()
    assert gen.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] <= 8


def test_concurrent_clients_are_served_in_one_batch_each_its_own_answer(client):
    """Four requests at once: they generate together (agenttrace.batch.size above 1 on their
    spans), each gets the answer it gets alone, and each span carries its roofline."""
    from concurrent.futures import ThreadPoolExecutor

    wrapped, _, server_spans, model = client
    questions = [f"Name a colour, then the number {i}." for i in range(4)]

    def ask(q):
        reply = wrapped.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=16)
        return reply.choices[0].message.content

    alone = [ask(q) for q in questions]
    server_spans.clear()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(ask, questions))
    assert together == alone
    served = spans_by_name(server_spans.get_finished_spans())[f"chat {model}"]
    assert len(served) == 4 and max(s.attributes[sc.BATCH_SIZE] for s in served) > 1
    assert all(sc.ROOFLINE_INTENSITY in s.attributes and sc.SERVE_QUEUE_S in s.attributes for s in served)


def test_the_serve_command_listens_and_answers(bundled, tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "agenttrace", "serve", "--port", "0", "--no-speculative"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "http://" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "agenttrace serve exited before listening"
        url = line[line.index("http://") :].split()[0]
        for _ in range(100):  # the message is printed just before uvicorn starts accepting
            try:
                with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=5) as r:
                    assert json.load(r) == {"status": "ok"}
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"no answer from {url}")
    finally:
        proc.terminate()
        proc.wait(30)
