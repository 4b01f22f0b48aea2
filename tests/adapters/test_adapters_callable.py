"""wrap_model: any function that calls a model, traced in one line; replies read in any shape."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.trace import SpanKind, StatusCode

import agenttrace as at
from agenttrace import FakeClock
from agenttrace import semconv as sc
from agenttrace.adapters.replies import read_reply
from agenttrace.testing import capture_telemetry, spans_by_name

ANTHROPIC_STYLE = {
    "id": "msg_1", "model": "claude-x", "stop_reason": "tool_use",
    "content": [{"type": "text", "text": "Let me check."}, {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {}}],
    "usage": {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 8},
}


def test_a_plain_function_returning_a_message_is_one_generation_span_in_the_attempt():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)

    def ask(messages, max_tokens=64):
        clock.advance_s(0.2)
        return ANTHROPIC_STYLE

    traced = at.wrap_model(ask, provider="anthropic", telemetry=tel)
    with at.agent_span("a", telemetry=tel), at.step_span():
        assert traced([{"role": "user", "content": "hi"}], max_tokens=64) is ANTHROPIC_STYLE  # unchanged
    named = spans_by_name(memory.get_finished_spans())
    (gen,) = named["chat claude-x"]  # the reply's model names the span
    a = gen.attributes
    assert gen.kind is SpanKind.CLIENT and gen.end_time - gen.start_time == 200_000_000
    assert (a[sc.GEN_AI_PROVIDER_NAME], a[sc.GEN_AI_RESPONSE_MODEL], a[sc.GEN_AI_RESPONSE_ID]) == ("anthropic", "claude-x", "msg_1")
    assert (a[sc.GEN_AI_USAGE_INPUT_TOKENS], a[sc.GEN_AI_USAGE_OUTPUT_TOKENS], a[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]) == (30, 12, 8)
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",) and a[sc.RESPONSE_TOOL_NAMES] == ("weather",)
    assert a[sc.GEN_AI_REQUEST_MAX_TOKENS] == 64
    (attempt,) = named["attempt 1"]
    assert gen.parent.span_id == attempt.context.span_id
    (agent,) = named["invoke_agent a"]
    assert agent.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == 30


def test_async_functions_exceptions_and_unknown_reply_shapes():
    tel, memory = capture_telemetry(FakeClock())

    async def ask(model: str):
        return object()  # nothing to read: the span still ends

    async def broken(model: str):
        raise ConnectionError("refused")

    asyncio.run(at.wrap_model(ask, telemetry=tel)(model="local"))
    with pytest.raises(ConnectionError):
        asyncio.run(at.wrap_model(broken, telemetry=tel, remote=False)(model="local"))
    spans = spans_by_name(memory.get_finished_spans())["chat local"]
    ok, failed = sorted(spans, key=lambda s: s.start_time)
    assert ok.status.status_code is StatusCode.UNSET and ok.attributes[sc.GEN_AI_REQUEST_MODEL] == "local"
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes[sc.ERROR_TYPE] == "ConnectionError"
    assert failed.kind is SpanKind.INTERNAL


@pytest.mark.parametrize(("reply", "expected"), [
    ("plain text", ("plain text", (), ("stop",), None, None)),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
     (None, ("f",), ("tool_calls",), None, None)),
    ({"id": "cc", "model": "m", "choices": [{"message": {"content": "a"}, "finish_reason": "stop"},
                                            {"message": {"tool_calls": [{"function": {"name": "g"}}]}, "finish_reason": "tool_calls"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
     ("a", ("g",), ("stop", "tool_calls"), "m", 5)),
])
def test_read_reply_reads_each_shape(reply, expected):
    r = read_reply(reply)
    assert (r.text, r.tool_names, r.finish_reasons, r.model, r.input_tokens) == expected
