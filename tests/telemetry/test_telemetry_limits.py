"""Long attribute values reach every exporter cut to the limit, with a visible marker."""

from __future__ import annotations

import json

import pytest

from agenttrace import FakeClock
from agenttrace.telemetry.truncation import DEFAULT_MAX_VALUE_LENGTH, max_value_length, truncate_value
from agenttrace.testing import capture_telemetry

LIMIT_VARS = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")


@pytest.fixture(autouse=True)
def _no_limit_variables(monkeypatch):
    for var in LIMIT_VARS:
        monkeypatch.delenv(var, raising=False)


def test_a_long_string_is_cut_to_the_limit_with_a_marker():
    value = "x" * 10_000
    cut = truncate_value(value, 100)
    assert len(cut) == 100 and cut.endswith("...[truncated from 10000 chars]")
    assert cut.startswith("x" * 60)
    assert truncate_value("short", 100) == "short"
    assert truncate_value(["a" * 200, "b"], 100) == (truncate_value("a" * 200, 100), "b")
    assert truncate_value(12345, 3) == 12345 and truncate_value(b"x" * 10, 3) == b"x" * 10


def test_the_limit_follows_the_standard_variables(monkeypatch):
    assert max_value_length() == DEFAULT_MAX_VALUE_LENGTH == 4096
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "500")
    assert max_value_length() == 500
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "0")
    assert max_value_length() is None  # 0: no limit
    assert max_value_length(64) == 64
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "lots")
    with pytest.raises(ValueError, match="OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT='lots' is not a whole number"):
        max_value_length()


def _record(tel):
    with tel.span("tool", "execute_tool t", {"big": "y" * 300, "small": "ok", "list": ["z" * 300]}) as span:
        span.add_event("exception", {"exception.stacktrace": "s" * 300})


def test_every_exporter_gets_the_cut_spans_and_the_sdk_does_not_cut_silently(tmp_path, monkeypatch):
    # Under this variable the SDK alone would cut to 200 with no marker: we cut, visibly, instead.
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "200")
    path = tmp_path / "t.jsonl"
    tel, memory = capture_telemetry(FakeClock(), trace_file=str(path))
    _record(tel)
    tel.shutdown()
    (span,) = memory.get_finished_spans()
    marker = "...[truncated from 300 chars]"
    assert len(span.attributes["big"]) == 200 and span.attributes["big"].endswith(marker)
    assert span.attributes["small"] == "ok" and span.attributes["list"][0].endswith(marker)
    assert span.events[0].attributes["exception.stacktrace"].endswith(marker)
    line = json.loads(path.read_text())
    attrs = {a["key"]: a["value"] for a in line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]}
    assert attrs["big"]["stringValue"] == span.attributes["big"]


def test_no_limit_leaves_values_whole():
    tel, memory = capture_telemetry(FakeClock(), max_attribute_length=0)
    _record(tel)
    tel.shutdown()
    (span,) = memory.get_finished_spans()
    assert span.attributes["big"] == "y" * 300


def test_a_cut_span_keeps_the_counts_the_sdk_dropped():
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agenttrace.telemetry.truncation import TruncatingExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2, max_events=1))
    provider.add_span_processor(SimpleSpanProcessor(TruncatingExporter(memory, 50)))
    span = provider.get_tracer("t").start_span("s", attributes={"b": 1, "c": 2, "a": "x" * 100})  # b dropped
    span.add_event("e1")
    span.add_event("e2")
    span.end()
    (cut,) = memory.get_finished_spans()
    assert cut.attributes["c"] == 2 and cut.attributes["a"] == "x" * 21 + "...[truncated from 100 chars]"
    assert (cut.dropped_attributes, cut.dropped_events) == (1, 1)
