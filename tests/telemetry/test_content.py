"""Content capture: off by default, on by setting or the standard variable; redacted and capped."""

from __future__ import annotations

import json

import agenttrace as at
from agenttrace import Agent, AgentConfig, ContentPolicy, FakeClock
from agenttrace import semconv as sc
from agenttrace.telemetry.content import CONTENT_ENV
from agenttrace.testing import ScriptedModel, capture_telemetry, spans_by_name
from tests.runtime.test_agent import weather_tool

SECRET_CALL = '{"tool": "weather", "arguments": {"city": "Paris"}}'


def _agent_spans(content: ContentPolicy | None, prompt: str):
    clock = FakeClock()
    tel, memory = capture_telemetry(clock, content=content)
    model = ScriptedModel([SECRET_CALL, '{"answer": "rain, mail bob@example.com"}'], clock)
    Agent(model, [weather_tool(clock)], telemetry=tel, config=AgentConfig(name="c")).run(prompt)
    return spans_by_name(memory.get_finished_spans())


def test_content_is_off_by_default(monkeypatch):
    monkeypatch.delenv(CONTENT_ENV, raising=False)
    named = _agent_spans(None, "key sk-abcdefghijklmnopqrstuvwx")
    for spans in named.values():
        for s in spans:
            assert not {sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_TOOL_CALL_ARGUMENTS} & set(s.attributes)


def test_the_standard_variable_turns_it_on_and_secrets_are_redacted(monkeypatch):
    monkeypatch.setenv(CONTENT_ENV, "true")
    named = _agent_spans(None, "My key is sk-proj-abcdefghijklmnopqrstuvwx, mail me at ann.lee@example.org")
    gen = named["chat scripted-model"][0]
    inputs = json.loads(gen.attributes[sc.GEN_AI_INPUT_MESSAGES])
    text = inputs[-1]["parts"][0]["content"]
    assert "sk-proj" not in text and "ann.lee@example.org" not in text
    assert "[REDACTED:api_key]" in text and "[REDACTED:email]" in text
    outputs = json.loads(named["chat scripted-model"][1].attributes[sc.GEN_AI_OUTPUT_MESSAGES])
    assert outputs[0]["role"] == "assistant" and "[REDACTED:email]" in outputs[0]["parts"][0]["content"]
    tool = named["execute_tool weather"][0]
    assert json.loads(tool.attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Paris"}
    assert "light rain" in tool.attributes[sc.GEN_AI_TOOL_CALL_RESULT]
    monkeypatch.setenv(CONTENT_ENV, "event_only")  # content on events only: never on our spans
    assert not ContentPolicy().enabled


def test_configured_patterns_and_the_length_cap():
    policy = ContentPolicy(enabled=True, redact=[("ticket", r"TICKET-\d+")], max_chars=40)
    assert policy.clean("see TICKET-123 now") == "see [REDACTED:ticket] now"
    assert policy.clean('{"password": "hunter22"}') == '{"password": "[REDACTED:secret]"}'
    long = policy.clean("x" * 100)
    assert long.startswith("x" * 40) and long.endswith("[60 more characters]")
    capped = json.loads(policy.to_json([{"content": "y" * 100, "n": 3}]))  # JSON stays valid
    assert capped[0]["n"] == 3 and len(capped[0]["content"]) < 70
    assert ContentPolicy(enabled=True, default_redactions=False).clean("a@b.io") == "a@b.io"


def test_configure_setting_reaches_the_wrapper_spans(monkeypatch):
    monkeypatch.delenv(CONTENT_ENV, raising=False)
    memory_tel = at.configure(capture_content=True, clock=FakeClock(), synchronous=True, exporters=[])
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    memory = InMemorySpanExporter()
    memory_tel.provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        with at.agent_span("a"), at.step_span():
            with at.tool_span("lookup", arguments={"q": "token=abcdef123456"}) as t:
                t.result("found ann@example.com")
    finally:
        at.shutdown()
    (tool,) = spans_by_name(memory.get_finished_spans())["execute_tool lookup"]
    assert "abcdef123456" not in tool.attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS]
    assert tool.attributes[sc.GEN_AI_TOOL_CALL_RESULT] == "found [REDACTED:email]"
