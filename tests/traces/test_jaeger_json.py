"""OTLP -> Jaeger JSON, by Jaeger's own rules: exact expectations for kinds, resources, status,
events, links, value types; Jaeger's own UI fixture parses and prints back unchanged; a recorded
agent run converts with its GenAI operations, errors and speculation rounds where Jaeger wants them."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceState,
)
from recorded_runs import record_agent_run
from shared_fixtures import shared_fixture

from agenttrace.cli import main
from agenttrace.traces.jaeger_json import JaegerResponse, JaegerTrace, to_jaeger
from agenttrace.traces.otlp_file import read_spans

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000_000_000
TRACE_ID = 0x0123456789ABCDEF0011223344556677
SHORT_TRACE_ID = 0x42  # high half zero: Jaeger prints 16 hex digits


class Ids(IdGenerator):
    def __init__(self, trace_ids):
        self.trace_ids = list(trace_ids)
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_ids.pop(0)

    def generate_span_id(self) -> int:
        self.span_id += 1
        return self.span_id


def _provider(resource: Resource, ids: IdGenerator, memory: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=resource, id_generator=ids, sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider


def _hand_built_spans():
    memory = InMemorySpanExporter()
    ids = Ids([TRACE_ID, SHORT_TRACE_ID])
    agent = _provider(Resource({"service.name": "agent-svc", "host.name": "h1", "process.pid": 42}), ids, memory)
    tools = _provider(Resource({"service.name": "tool-svc"}), ids, memory)
    anonymous = _provider(Resource({"deployment": "test"}), ids, memory)
    tracer = agent.get_tracer("agenttrace", "0.1.0")

    root = tracer.start_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}, start_time=T0)
    in_root = trace.set_span_in_context(root)
    chat = tracer.start_span("chat m", context=in_root, kind=SpanKind.CLIENT, start_time=T0 + 1_000, attributes={
        "gen_ai.operation.name": "chat",
        "gen_ai.response.finish_reasons": ["stop", "length"],
        "agenttrace.spec.acceptance_per_position": [3, 1],
        "x.ratios": [0.5, 1.0, 1e-7],
        "x.note": "<a&b>",
        "x.ratio": 0.25,
        "x.big": 2**60,
        "x.small": -(2**53) + 1,
        "x.ok": True,
    })
    chat.add_event("speculate.round", {"drafted": 3, "accepted": 2}, timestamp=T0 + 1_500_999)
    chat.add_event("exception", {"event": "custom", "exception.type": "TimeoutError"}, timestamp=T0 + 1_600_000)
    chat.set_status(Status(StatusCode.ERROR, "model timed out"))
    chat.end(end_time=T0 + 2_001_999)
    linked = SpanContext(0xAA << 64 | 0xBB, 0xCC, is_remote=True)
    tool = tools.get_tracer("tools").start_span(
        "execute_tool t", context=in_root, start_time=T0 + 2_100_000,
        links=[Link(linked, {"why": "batch"}), Link(root.get_span_context(), {"opentracing.ref_type": "child_of"})],
    )
    tool.set_status(Status(StatusCode.OK))
    tool.end(end_time=T0 + 3_000_000)
    root.end(end_time=T0 + 3_000_500)

    remote = SpanContext(SHORT_TRACE_ID, 0x99, is_remote=True, trace_state=TraceState([("k", "v"), ("z", "1")]))
    server = anonymous.get_tracer("server").start_span(
        "handle", context=trace.set_span_in_context(NonRecordingSpan(remote)), kind=SpanKind.SERVER,
        start_time=T0, links=[Link(remote, {"opentracing.ref_type": "child_of"})],
    )
    server.end(end_time=T0 + 999)
    return memory.get_finished_spans()


def _kv(key, type_, value):
    return {"key": key, "type": type_, "value": value}


TRACE = "0123456789abcdef0011223344556677"
EXPECTED_TRACE_1 = {
    "traceID": TRACE,
    "spans": [
        {
            "traceID": TRACE,
            "spanID": "0000000000000002",
            "flags": 1,
            "operationName": "chat m",
            "references": [{"refType": "CHILD_OF", "traceID": TRACE, "spanID": "0000000000000001"}],
            "startTime": 1_700_000_000_000_001,
            "duration": 2_000,  # (2_001_999 - 1_000) ns, truncated to microseconds
            "tags": [
                _kv("otel.scope.name", "string", "agenttrace"),
                _kv("otel.scope.version", "string", "0.1.0"),
                _kv("gen_ai.operation.name", "string", "chat"),
                _kv("gen_ai.response.finish_reasons", "string", '["stop","length"]'),
                _kv("agenttrace.spec.acceptance_per_position", "string", "[3,1]"),
                _kv("x.ratios", "string", "[0.5,1,1e-7]"),
                _kv("x.note", "string", "<a&b>"),
                _kv("x.ratio", "float64", 0.25),
                _kv("x.big", "int64", "1152921504606846976"),
                _kv("x.small", "int64", -(2**53) + 1),
                _kv("x.ok", "bool", True),
                _kv("span.kind", "string", "client"),
                _kv("otel.status_code", "string", "ERROR"),
                _kv("error", "bool", True),
                _kv("otel.status_description", "string", "model timed out"),
            ],
            "logs": [
                {"timestamp": 1_700_000_000_001_500, "fields": [
                    _kv("event", "string", "speculate.round"), _kv("drafted", "int64", 3), _kv("accepted", "int64", 2),
                ]},
                {"timestamp": 1_700_000_000_001_600, "fields": [  # its own `event` attribute wins
                    _kv("event", "string", "custom"), _kv("exception.type", "string", "TimeoutError"),
                ]},
            ],
            "processID": "p1",
            "warnings": None,
        },
        {
            "traceID": TRACE,
            "spanID": "0000000000000003",
            "flags": 1,
            "operationName": "execute_tool t",
            "references": [
                # the link to the parent carries child_of: it retypes the parent reference
                {"refType": "CHILD_OF", "traceID": TRACE, "spanID": "0000000000000001"},
                {"refType": "FOLLOWS_FROM", "traceID": "00000000000000aa00000000000000bb",
                 "spanID": "00000000000000cc"},
            ],
            "startTime": 1_700_000_000_002_100,
            "duration": 900,
            "tags": [
                _kv("otel.scope.name", "string", "tools"),
                _kv("span.kind", "string", "internal"),
                _kv("otel.status_code", "string", "OK"),
            ],
            "logs": [],
            "processID": "p2",
            "warnings": None,
        },
        {
            "traceID": TRACE,
            "spanID": "0000000000000001",
            "flags": 1,
            "operationName": "invoke_agent a",
            "references": [],
            "startTime": 1_700_000_000_000_000,
            "duration": 3_000,
            "tags": [
                _kv("otel.scope.name", "string", "agenttrace"),
                _kv("otel.scope.version", "string", "0.1.0"),
                _kv("gen_ai.operation.name", "string", "invoke_agent"),
                _kv("span.kind", "string", "internal"),
            ],
            "logs": [],
            "processID": "p1",
            "warnings": None,
        },
    ],
    "processes": {
        "p1": {"serviceName": "agent-svc", "tags": [_kv("host.name", "string", "h1"), _kv("process.pid", "int64", 42)]},
        "p2": {"serviceName": "tool-svc", "tags": []},
    },
    "warnings": None,
}
EXPECTED_TRACE_2 = {
    "traceID": "0000000000000042",
    "spans": [
        {
            "traceID": "0000000000000042",
            "spanID": "0000000000000004",
            "flags": 1,
            "operationName": "handle",
            # the only link names the parent with child_of: no second reference
            "references": [{"refType": "CHILD_OF", "traceID": "0000000000000042", "spanID": "0000000000000099"}],
            "startTime": 1_700_000_000_000_000,
            "duration": 0,
            "tags": [
                _kv("otel.scope.name", "string", "server"),
                _kv("span.kind", "string", "server"),
                _kv("w3c.tracestate", "string", "k=v,z=1"),
            ],
            "logs": [],
            "processID": "p1",
            "warnings": None,
        }
    ],
    "processes": {"p1": {"serviceName": "OTLPResourceNoServiceName", "tags": [_kv("deployment", "string", "test")]}},
    "warnings": None,
}


def test_conversion_follows_jaegers_rules_exactly():
    out = json.loads(to_jaeger(_hand_built_spans()).model_dump_json())
    assert out == {"data": [EXPECTED_TRACE_1, EXPECTED_TRACE_2], "total": 0, "limit": 0, "offset": 0, "errors": None}


def test_jaegers_own_ui_fixture_reads_and_prints_back_unchanged():
    fixture = json.loads((shared_fixture("jaeger-ui-trace-example.json")).read_text())
    assert json.loads(JaegerTrace.model_validate(fixture).model_dump_json()) == fixture
    # and our output has exactly the fields of Jaeger's spans and processes (flags aside: 0 there)
    ours = json.loads(to_jaeger(_hand_built_spans()).model_dump_json())["data"][0]
    assert {k for s in ours["spans"] for k in s} - {"flags"} == {k for s in fixture["spans"] for k in s}
    assert ours.keys() == fixture.keys()
    assert {k for p in ours["processes"].values() for k in p} == {k for p in fixture["processes"].values() for k in p}


def test_a_recorded_agent_run_reads_well_in_jaeger(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    record_agent_run(path)
    out_path = tmp_path / "jaeger.json"
    assert main(["export", str(path), "--jaeger-json", str(out_path)]) == 0
    assert f"wrote 18 spans (2 traces) from 1 file(s) to {out_path}" in capsys.readouterr().out
    response = JaegerResponse.model_validate_json(out_path.read_text())
    agent_trace, server_trace = response.data
    assert len(agent_trace.spans) == 17 and len(server_trace.spans) == 1
    (process,) = agent_trace.processes.values()
    assert process.serviceName == "replay-test"
    proc_tags = {t.key: t.value for t in process.tags}
    assert proc_tags["agenttrace.run.label"] == "baseline" and "service.name" not in proc_tags

    def tags(span):
        return {t.key: t.value for t in span.tags}

    spans = {s.operationName: s for s in agent_trace.spans}
    assert tags(spans["invoke_agent agent"])["gen_ai.operation.name"] == "invoke_agent"
    assert tags(spans["execute_tool calculator"])["gen_ai.operation.name"] == "execute_tool"
    assert all(tags(s)["span.kind"] == "internal" for s in agent_trace.spans)
    assert all(tags(s)["otel.scope.name"] == "agenttrace" for s in agent_trace.spans)
    chats = [s for s in agent_trace.spans if s.operationName == "chat scripted-model"]
    assert all(tags(s)["gen_ai.operation.name"] == "chat" for s in chats)
    rounds = [log for s in chats for log in s.logs]
    assert [{f.key: f.value for f in log.fields} for log in rounds] == [
        {"event": "speculate.round", "drafted": 3, "accepted": 2, "draft_s": 0.01, "verify_s": 0.02},
        {"event": "speculate.round", "drafted": 3, "accepted": 3, "draft_s": 0.01, "verify_s": 0.02},
    ]
    failed = [s for s in agent_trace.spans if tags(s).get("error") is True]
    assert sorted(s.operationName for s in failed) == ["attempt 1", "parse_tool_call"]
    for s in failed:
        assert tags(s)["otel.status_code"] == "ERROR" and tags(s)["otel.status_description"]
        assert tags(s)["error.type"] in ("parse_error", "no_json")
    by_id = {s.spanID: s for s in agent_trace.spans}
    (root,) = [s for s in agent_trace.spans if not s.references]
    for s in agent_trace.spans:
        if s is not root:
            (ref,) = s.references
            assert ref.refType == "CHILD_OF" and ref.spanID in by_id
    (server,) = server_trace.spans
    assert [r.refType for r in server.references] == ["CHILD_OF", "FOLLOWS_FROM"]
    assert tags(server)["span.kind"] == "server" and tags(server)["w3c.tracestate"] == "vendor=v1"
    assert tags(server)["big.number"] == str(2**60)


def test_jaeger_json_to_stdout_keeps_stdout_clean(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    record_agent_run(path)
    assert main(["export", str(path), "--jaeger-json", "-"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["data"]) == 2 and "wrote 18 spans" in captured.err


def test_converting_a_file_equals_converting_the_live_spans(tmp_path):
    # The file loses only the sampled bit (the SDK's OTLP encoder does not write trace flags).
    memory = InMemorySpanExporter()
    path = tmp_path / "run.jsonl"
    record_agent_run(path, extra_exporters=[memory])
    live = json.loads(to_jaeger(memory.get_finished_spans()).model_dump_json())
    for t in live["data"]:
        for s in t["spans"]:
            assert s.pop("flags") == 1
    assert json.loads(to_jaeger(read_spans([path]).spans).model_dump_json()) == live
