"""Content capture: off by default, on by setting or the standard variable; redacted and capped."""

from __future__ import annotations

import json

import pytest

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


# -- secrets inside JSON-escaped text (issue 31, item 9) -------------------------------------
SECRET = "Hunter2Canary9"
REDACTED = {"user": "ann", "password": "[REDACTED:secret]"}


class _Span:
    def __init__(self) -> None:
        self.attributes: dict[str, str] = {}

    def set_attribute(self, key: str, value: str) -> None:
        self.attributes[key] = value


def _wrapped(text: str, levels: int) -> str:
    """`text` as a string value of a JSON document, `levels` times over (escaped once more each time)."""
    for _ in range(levels):
        text = json.dumps({"body": text})
    return text


def _unwrapped(text: str, levels: int) -> str:
    for _ in range(levels):
        text = json.loads(text)["body"]
    return text


def _recorded(policy: ContentPolicy, attribute: str, text: str) -> str:
    """`text` recorded as the attribute holds it (a tool's answer), and read back out of it."""
    span = _Span()
    if attribute == sc.GEN_AI_INPUT_MESSAGES:
        policy.record_messages(span, [{"role": "tool", "parts": [{"type": "tool_call_response", "response": text}]}], None)
        return json.loads(span.attributes[attribute])[0]["parts"][0]["response"]
    if attribute == sc.GEN_AI_OUTPUT_MESSAGES:
        policy.record_messages(span, None, [{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
        return json.loads(span.attributes[attribute])[0]["parts"][0]["content"]
    policy.record_tool_call(span, None, text)
    return span.attributes[attribute]


ATTRIBUTES = [sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_TOOL_CALL_RESULT]


@pytest.mark.parametrize("attribute", ATTRIBUTES)
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_a_password_inside_escaped_json_is_redacted_and_the_json_still_parses(attribute, levels):
    # levels=1: {"body": "{\"user\": \"ann\", \"password\": \"...\"}"}; 2: \\\" around the password
    text = _wrapped(json.dumps({"user": "ann", "password": SECRET}), levels)
    out = _recorded(ContentPolicy(enabled=True), attribute, text)
    assert SECRET not in out
    assert json.loads(_unwrapped(out, levels)) == REDACTED  # every level still parses, the rest kept


@pytest.mark.parametrize("attribute", ATTRIBUTES)
@pytest.mark.parametrize("levels", [0, 1, 2])
def test_a_password_between_unicode_escaped_quotes_is_redacted(attribute, levels):
    # not JSON as it stands: a log line quoting a document whose quotes are \u0022 escapes
    snippet = json.dumps({"user": "ann", "password": SECRET}).replace('"', "\\u0022")
    text = _wrapped(f"got {snippet} back", levels)
    out = _recorded(ContentPolicy(enabled=True), attribute, text)
    assert SECRET not in out
    line = _unwrapped(out, levels)
    assert line.startswith("got ") and line.endswith(" back")
    assert json.loads(line[4:-5].replace("\\u0022", '"')) == REDACTED


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"kind": "basic", "v": SECRET}, "[REDACTED:secret]"),  # a whole object under the key
        ([SECRET, "spare"], "[REDACTED:secret]"),
        (SECRET + "\\", "[REDACTED:secret]"),  # ends in a backslash: an escaped quote follows it
        (SECRET + '"quoted', "[REDACTED:secret]"),
        (int("7" + "0" * 12), "[REDACTED:secret]"),  # a number: quoted, so the document stays JSON
    ],
    ids=["object", "list", "trailing-backslash", "inner-quote", "number"],
)
@pytest.mark.parametrize("where", ["document", "in-prose", "escaped-in-prose"])
def test_any_value_under_a_secret_key_is_redacted_and_the_document_stays_valid(value, expected, where):
    doc = json.dumps({"user": "ann", "api_key": value, "n": 3})
    text = {"document": doc, "in-prose": f"the service said: {doc} (done)",
            "escaped-in-prose": f"log: body={json.dumps(doc)} status=200"}[where]
    out = ContentPolicy(enabled=True).clean(text)
    assert SECRET not in out and "7000000000000" not in out
    snippet = out[out.index("{") : out.rindex("}") + 1] if where == "in-prose" else out
    if where == "escaped-in-prose":
        snippet = json.loads(out[len("log: body=") : -len(" status=200")])
    assert json.loads(snippet) == {"user": "ann", "api_key": expected, "n": 3}


def test_json_without_secrets_is_kept_as_written():
    policy = ContentPolicy(enabled=True)
    pretty = json.dumps({"user": "ann", "token_count": 12, "tokenizer": "gpt2", "nested": {"a": [1, 2]}}, indent=2)
    assert policy.clean(pretty) == pretty  # not re-written: nothing in it to redact
    assert policy.clean(_wrapped(pretty, 2)) == _wrapped(pretty, 2)
    escaped = json.dumps({"mail": "ann@example.com"}, ensure_ascii=True)
    assert json.loads(policy.clean(escaped)) == {"mail": "[REDACTED:email]"}


def test_hostile_text_is_redacted_in_bounded_time():
    # each of these makes the JSON parser fail late or recurse deep; none may stall or raise
    policy = ContentPolicy(enabled=True)
    for text in ("[" * 50_000, '{"a": "' * 20_000, '"{' * 20_000, '{"a":' * 500 + "1" + "}" * 500,
                 'password: "' * 20_000, "password:" + "\\" * 100_000):
        assert isinstance(policy.clean(text), str)


def _attribute_values(trace_text: str, key: str) -> list[str]:
    out = []
    for line in trace_text.splitlines():
        for rs in json.loads(line)["resourceSpans"] if line.strip() else ():
            for ss in rs["scopeSpans"]:
                out += [a["value"]["stringValue"] for s in ss["spans"] for a in s.get("attributes", ()) if a["key"] == key]
    return out


def _every_string(value: object) -> list[str]:
    """Every string in `value`, and in every string of it that is JSON, at any depth."""
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return [value]
        return [value, *_every_string(inner)] if not isinstance(inner, (int, float)) else [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_every_string(v))]
    if isinstance(value, list):
        return [s for v in value for s in _every_string(v)]
    return []


def test_no_escaped_secret_reaches_the_trace_file_with_capture_on(tmp_path):
    from agenttrace import Task, Tool
    from agenttrace.telemetry import Telemetry

    secrets = {"pw1": "CanaryPwOne11", "pw2": "CanaryPwTwo22", "tok": "CanaryTokThree33", "key": "CanaryKeyFour44"}
    level1 = json.dumps({"status": 200, "body": json.dumps({"user": "ann", "password": secrets["pw1"]})})
    level2 = _wrapped(json.dumps({"client_secret": secrets["pw2"]}), 2)
    unicode_quoted = "got " + json.dumps({"token": secrets["tok"]}).replace('"', "\\u0022")

    def fetch(url: str) -> str:  # a tool whose answer is JSON holding JSON
        return json.dumps({"url": url, "response": level1, "cached": level2, "log": unicode_quoted})

    tool = Tool("fetch", "Fetch a URL.", {"type": "object", "properties": {"url": {"type": "string"}},
                                          "required": ["url"]}, fetch)
    clock = FakeClock()
    path = tmp_path / "trace.jsonl"
    tel = Telemetry(clock=clock, trace_file=path, synchronous=True, content=ContentPolicy(enabled=True))
    answer = json.dumps({"answer": "config: " + json.dumps({"api_key": secrets["key"], "extra": level1})})
    model = ScriptedModel(['{"tool": "fetch", "arguments": {"url": "https://example.org/cfg"}}', answer], clock)
    result = Agent(model, [tool], telemetry=tel, config=AgentConfig(name="e")).run(
        Task(id="t", prompt=f"Here is what I got: {level2}"))
    tel.shutdown()
    assert result.outcome.value == "completed"
    text = path.read_text()
    assert not any(secret in text for secret in secrets.values())
    found = {key: _attribute_values(text, key) for key in ATTRIBUTES}
    assert [len(v) for v in found.values()] == [2, 2, 1]  # two model calls, one tool call
    for key, values in found.items():
        for value in values:
            strings = _every_string(json.loads(value))  # each attribute is still JSON, to the bottom
            assert not any(secret in s for s in strings for secret in secrets.values()), key
    (result_text,) = found[sc.GEN_AI_TOOL_CALL_RESULT]
    assert "\n".join(_every_string(json.loads(result_text))).count("[REDACTED:secret]") >= 3
