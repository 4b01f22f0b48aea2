"""wrap_openai on a fake client and a fake clock: span attributes, streaming TTFT, the span's end
(exhausted, closed, abandoned), errors, async, and validating the returned tool calls."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from opentelemetry.trace import SpanKind, StatusCode

import agenttrace as at
from agenttrace import FakeClock
from agenttrace import semconv as sc
from agenttrace.testing import capture_telemetry, spans_by_name

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}}]


def completion(tool_args: str | None = None) -> ChatCompletion:
    message = {"role": "assistant", "content": None if tool_args else "Hello"}
    if tool_args:
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": tool_args}}]
    return ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_args else "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47},
    })


def chunk(delta=None, finish=None, usage=None) -> ChatCompletionChunk:
    body = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 0, "model": "served-model"}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage:
        body["usage"] = usage
    return ChatCompletionChunk.model_validate(body)


def stream_chunks(include_usage: bool):
    out = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "weather", "arguments": '{"city"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "Oslo"}'}}]}),
        chunk({}, "tool_calls"),
    ]
    if include_usage:
        out.append(chunk(None, usage={"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}))
    return out


class FakeStream:
    def __init__(self, chunks, clock):
        self.chunks, self.clock, self.closed = iter(chunks), clock, False

    def __iter__(self):
        return self

    def __next__(self):
        c = next(self.chunks)
        self.clock.advance_s(0.1)
        return c

    def close(self):
        self.closed = True


class FakeCompletions:
    def __init__(self, clock, fail=None):
        self.clock, self.calls, self.fail, self.streams = clock, [], fail, []

    def create(self, **kwargs):
        self.calls.append(kwargs)
        self.clock.advance_s(0.2)
        if self.fail:
            raise self.fail
        if kwargs.get("stream"):
            include = bool((kwargs.get("stream_options") or {}).get("include_usage"))
            self.streams.append(FakeStream(stream_chunks(include), self.clock))
            return self.streams[-1]
        return completion(kwargs.get("tool_args"))


def client(clock, fail=None):
    return SimpleNamespace(base_url="http://127.0.0.1:8123/v1/", chat=SimpleNamespace(completions=FakeCompletions(clock, fail)))


def _setup(fail=None):
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)
    raw = client(clock, fail)
    return clock, tel, memory, raw, at.wrap_openai(raw, telemetry=tel)


def test_a_completion_is_a_client_generation_span_in_the_current_attempt():
    clock, tel, memory, raw, wrapped = _setup()
    with at.agent_span("a", telemetry=tel), at.step_span():
        reply = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=16, temperature=0)
        results = at.validate_tool_calls(reply, tools=TOOLS)
    assert reply.choices[0].message.content == "Hello" and results == []
    spans = memory.get_finished_spans()
    named = spans_by_name(spans)
    (gen,) = named["chat m"]
    assert gen.kind is SpanKind.CLIENT and gen.parent.span_id == named["attempt 1"][0].context.span_id
    a = gen.attributes
    assert (a[sc.GEN_AI_PROVIDER_NAME], a[sc.SERVER_ADDRESS], a[sc.SERVER_PORT]) == ("openai_compatible", "127.0.0.1", 8123)
    assert (a[sc.GEN_AI_REQUEST_MAX_TOKENS], a[sc.GEN_AI_REQUEST_TEMPERATURE]) == (16, 0)
    assert (a[sc.GEN_AI_USAGE_INPUT_TOKENS], a[sc.GEN_AI_USAGE_OUTPUT_TOKENS]) == (40, 7)
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",) and a[sc.GEN_AI_RESPONSE_MODEL] == "served-model"
    assert gen.end_time - gen.start_time == 200_000_000
    header = raw.chat.completions.calls[0]["extra_headers"]["traceparent"]
    assert format(gen.context.span_id, "016x") in header  # the server can continue this trace
    assert named["invoke_agent a"][0].attributes[sc.GEN_AI_REQUEST_MODEL] == "m"


def test_returned_tool_calls_validate_against_the_callers_schema():
    clock, tel, memory, raw, wrapped = _setup()
    with at.agent_span("a", telemetry=tel) as run, at.step_span():
        bad = wrapped.chat.completions.create(model="m", messages=[], tools=TOOLS, tool_args='{"city": "Rome", "x": 1}')
        (r1,) = at.validate_tool_calls(bad, tools=TOOLS)
        at.current_step().retry()
        good = wrapped.chat.completions.create(model="m", messages=[], tools=TOOLS, tool_args='{"city": "Rome"}')
        (r2,) = at.validate_tool_calls(good, tools=TOOLS)
    assert not r1.ok and r1.call_id == "call_1" and "additional" in r1.message.lower()
    assert r2.ok and r2.arguments == {"city": "Rome"}
    assert (run.decisions_valid, run.decisions_invalid) == (1, 1)
    named = spans_by_name(memory.get_finished_spans())
    assert named["chat m"][0].attributes[sc.RESPONSE_TOOL_NAMES] == ("weather",)
    assert [a.attributes[sc.ATTEMPT_OUTCOME] for a in named["attempt 1"] + named["attempt 2"]] == ["validation_error", "ok"]
    assert named["agent_step 1"][0].attributes[sc.STEP_OUTCOME] == "tool_call"


def test_a_stream_records_ttft_and_usage_and_ends_when_exhausted():
    clock, tel, memory, raw, wrapped = _setup()
    stream = wrapped.chat.completions.create(model="m", messages=[], stream=True)
    assert raw.chat.completions.calls[0]["stream_options"] == {"include_usage": True}
    seen = list(stream)
    assert len(seen) == 6 and all(c.choices for c in seen)  # our usage chunk is kept from the caller
    (gen,) = memory.get_finished_spans()
    a = gen.attributes
    # request at +0.2 s, role chunk at +0.3, first content at +0.4
    assert a[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(0.4)
    assert (a[sc.GEN_AI_USAGE_INPUT_TOKENS], a[sc.GEN_AI_USAGE_OUTPUT_TOKENS]) == (30, 5)
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",) and a[sc.GEN_AI_REQUEST_STREAM] is True
    assert gen.end_time - gen.start_time == pytest.approx(0.9e9)
    assert stream.text == "Hello"
    assert stream.tool_calls == [{"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]
    (check,) = at.validate_tool_calls(stream, tools=TOOLS, telemetry=tel)
    assert check.ok and check.arguments == {"city": "Oslo"}


def test_a_caller_that_asked_for_usage_sees_the_usage_chunk():
    clock, tel, memory, raw, wrapped = _setup()
    seen = list(wrapped.chat.completions.create(model="m", messages=[], stream=True, stream_options={"include_usage": True}))
    assert len(seen) == 7 and seen[-1].usage.completion_tokens == 5


def test_stopping_early_or_closing_ends_the_span_and_closes_the_stream():
    clock, tel, memory, raw, wrapped = _setup()
    for chunk_ in wrapped.chat.completions.create(model="m", messages=[], stream=True):
        if chunk_.choices[0].delta.content:
            break
    (gen,) = memory.get_finished_spans()  # ended at the break, not at garbage collection later
    assert gen.attributes[sc.STREAM_STOPPED_EARLY] is True and raw.chat.completions.streams[0].closed
    assert gen.status.status_code is StatusCode.UNSET
    with wrapped.chat.completions.create(model="m", messages=[], stream=True) as stream:
        next(stream)
    assert len(memory.get_finished_spans()) == 2 and raw.chat.completions.streams[1].closed


def test_a_failed_request_marks_the_span_and_raises_unchanged():
    clock, tel, memory, raw, wrapped = _setup(fail=ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        with at.agent_span("a", telemetry=tel), at.step_span():
            wrapped.chat.completions.create(model="m", messages=[])
    named = spans_by_name(memory.get_finished_spans())
    gen = named["chat m"][0]
    assert gen.status.status_code is StatusCode.ERROR and gen.attributes[sc.ERROR_TYPE] == "ConnectionError"
    assert named["attempt 1"][0].attributes[sc.ATTEMPT_OUTCOME] == "error"


def test_the_async_client_and_async_streams():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)

    class AsyncStream:
        def __init__(self):
            self.items, self.closed = iter(stream_chunks(True)), False

        def __aiter__(self):
            return self

        async def __anext__(self):
            try:
                c = next(self.items)
            except StopIteration:
                raise StopAsyncIteration from None
            clock.advance_s(0.1)
            return c

        async def close(self):
            self.closed = True

    class AsyncCompletions:
        async def create(self, **kwargs):
            clock.advance_s(0.2)
            return AsyncStream() if kwargs.get("stream") else completion()

    raw = SimpleNamespace(base_url="https://api.openai.com/v1", chat=SimpleNamespace(completions=AsyncCompletions()))
    wrapped = at.wrap_openai(raw, telemetry=tel)

    async def main():
        reply = await wrapped.chat.completions.create(model="gpt", messages=[])
        chunks = [c async for c in await wrapped.chat.completions.create(model="gpt", messages=[], stream=True)]
        return reply, chunks

    reply, chunks = asyncio.run(main())
    assert reply.choices[0].message.content == "Hello" and len(chunks) == 6
    first, second = memory.get_finished_spans()
    assert first.attributes[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert second.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(0.4)
    assert second.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 5


def test_content_capture_records_the_messages_when_on():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock, content=at.ContentPolicy(enabled=True))
    wrapped = at.wrap_openai(client(clock), telemetry=tel)
    wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "mail joe@example.com"}])
    (gen,) = memory.get_finished_spans()
    inputs = json.loads(gen.attributes[sc.GEN_AI_INPUT_MESSAGES])
    assert inputs == [{"role": "user", "parts": [{"type": "text", "content": "mail [REDACTED:email]"}]}]
    assert json.loads(gen.attributes[sc.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "Hello"
