"""Telemetry never breaks the agent: failing exporters and dead collectors are counted, and the
trace file still gets every span."""

from __future__ import annotations

import json
import socket
import time

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenttrace import Agent, FakeClock, Telemetry
from agenttrace.telemetry.exporters import resolve_otlp_endpoint
from agenttrace.testing import ScriptedModel
from agenttrace.examples.tools import default_tools

REPLIES = ['{"tool": "calculator", "arguments": {"expression": "2+2"}}', '{"answer": "4"}']


class Exploding(SpanExporter):
    def export(self, spans):
        raise RuntimeError("exporter bug")

    def shutdown(self):
        raise RuntimeError("shutdown bug")


class Refusing(SpanExporter):
    def export(self, spans):
        return SpanExportResult.FAILURE

    def shutdown(self):
        pass


def _count_lines_spans(path) -> int:
    n = 0
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                n += len(ss["spans"])
    return n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def _run(tel: Telemetry, clock: FakeClock):
    return Agent(ScriptedModel(REPLIES, clock), default_tools(), telemetry=tel).run("What is 2+2?")


def test_an_exporter_that_raises_does_not_fail_the_run_or_lose_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTTRACE_STRICT_TELEMETRY", "0")
    clock = FakeClock()
    path = tmp_path / "t.jsonl"
    tel = Telemetry(clock=clock, trace_file=path, exporters=[Exploding(), Refusing()])
    result = _run(tel, clock)
    summary = tel.shutdown()
    assert result.outcome.value == "completed"
    assert _count_lines_spans(path) == summary.exported[f"file {path}"] == 13
    assert summary.failed["Exploding#0"] == 13 and summary.failed["Refusing#1"] == 13
    assert summary.failures["export to Exploding#0"] >= 1 and summary.failures["shutdown of Exploding#0"] == 1


def test_an_unreachable_otlp_endpoint_does_not_fail_the_run(tmp_path):
    for protocol in ("http/protobuf", "grpc"):
        clock = FakeClock()
        path = tmp_path / f"{protocol.replace('/', '-')}.jsonl"
        url = f"http://127.0.0.1:{_free_port()}"
        tel = Telemetry(clock=clock, trace_file=path, otlp_endpoint=url, otlp_protocol=protocol, otlp_timeout_s=1.0)
        started = time.perf_counter()
        result = _run(tel, clock)
        assert time.perf_counter() - started < 1.0  # export is off the agent's path
        summary = tel.shutdown()
        assert result.outcome.value == "completed"
        assert _count_lines_spans(path) == 13
        (otlp,) = [name for name in summary.failed if name.startswith("OTLP")]
        assert summary.failed[otlp] == 13 and summary.exported[otlp] == 0
        assert not summary.ok


def test_otlp_endpoint_resolution_follows_the_standard_variables(monkeypatch):
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(var, raising=False)
    assert resolve_otlp_endpoint(None, None) is None
    assert resolve_otlp_endpoint("", None) == ("http://localhost:4318", "http/protobuf")
    assert resolve_otlp_endpoint("", "grpc") == ("http://localhost:4317", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert resolve_otlp_endpoint(None, None) == ("http://collector:4318", "grpc")
    assert resolve_otlp_endpoint("http://other:1", "http/protobuf") == ("http://other:1", "http/protobuf")


def test_resource_names_the_service_and_the_run(tmp_path):
    clock = FakeClock()
    tel = Telemetry(clock=clock, trace_file=tmp_path / "r.jsonl", service_name="my-agent", run_label="baseline")
    _run(tel, clock)
    tel.shutdown()
    first = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    attrs = {a["key"]: a["value"] for a in first["resourceSpans"][0]["resource"]["attributes"]}
    assert attrs["service.name"] == {"stringValue": "my-agent"}
    assert attrs["agenttrace.run.label"] == {"stringValue": "baseline"}
    assert attrs["agenttrace.run.id"]["stringValue"] == tel.run_id
    assert {"service.version", "host.name", "process.pid"} <= attrs.keys()


def test_live_export_over_http_and_grpc_delivers_what_the_file_records(tmp_path):
    from otlp_receiver import grpc_receiver, http_receiver

    from agenttrace.traces.otlp_file import read_spans

    for receiver, protocol in ((http_receiver, "http/protobuf"), (grpc_receiver, "grpc")):
        clock = FakeClock()
        path = tmp_path / f"{protocol.replace('/', '-')}.jsonl"
        with receiver() as (url, received):
            tel = Telemetry(clock=clock, trace_file=path, otlp_endpoint=url, otlp_protocol=protocol,
                            service_name="live", max_attribute_length=64)
            with tel.span("tool", "execute_tool t", {"long": "q" * 500}):
                clock.advance_s(0.5)
            _run(tel, clock)
            summary = tel.shutdown()
        assert summary.ok and summary.exported[f"OTLP {protocol} {url}"] == 14, protocol
        sent = {span.span_id.hex(): span for _, _, span in received.spans()}
        recorded = {f"{s.context.span_id:016x}": s for s in read_spans([path]).spans}
        assert sent.keys() == recorded.keys(), protocol
        for span_id, span in sent.items():
            assert (span.name, span.start_time_unix_nano, span.end_time_unix_nano) == (
                recorded[span_id].name, recorded[span_id].start_time, recorded[span_id].end_time)
        (tool,) = [s for s in sent.values() if s.name == "execute_tool t"]
        (long_value,) = [a.value.string_value for a in tool.attributes if a.key == "long"]
        assert len(long_value) == 64 and long_value.endswith("...[truncated from 500 chars]")


def test_the_scope_names_the_newest_schema_of_the_installed_semantic_conventions(tmp_path):
    from opentelemetry.semconv.schemas import Schemas

    from agenttrace import semconv as sc

    assert sc.SCHEMA_URL == list(Schemas)[-1].value  # bump SCHEMA_URL when the package moves on
    path = tmp_path / "t.jsonl"
    tel = Telemetry(trace_file=path, clock=FakeClock())
    Agent(ScriptedModel(REPLIES, tel.clock), default_tools(), telemetry=tel).run("2+2?")
    tel.shutdown()
    scopes = [ss for line in path.read_text().splitlines() for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"]]
    assert {ss.get("schemaUrl") for ss in scopes} == {sc.SCHEMA_URL}


def test_genai_client_metrics_go_beside_the_trace_file_and_the_report_skips_them(tmp_path):
    from agenttrace import semconv as sc
    from agenttrace.report import report_from_files

    path = tmp_path / "run.jsonl"
    tel = Telemetry(trace_file=path, clock=FakeClock(), metrics=True, synchronous=True)
    Agent(ScriptedModel(REPLIES, tel.clock), default_tools(), telemetry=tel).run("2+2?")
    tel.shutdown()
    lines = (tmp_path / "run.metrics.jsonl").read_text().splitlines()
    metrics = {m["name"]: m for line in lines for rm in json.loads(line)["resourceMetrics"]
               for sm in rm["scopeMetrics"] for m in sm["metrics"]}
    duration, tokens = metrics[sc.METRIC_OPERATION_DURATION], metrics[sc.METRIC_TOKEN_USAGE]
    assert duration["unit"] == "s" and tokens["unit"] == "{token}"
    (point,) = duration["histogram"]["dataPoints"]
    assert int(point["count"]) == 2  # one per generation
    assert point["explicitBounds"][:3] == [0.01, 0.02, 0.04]
    attrs = {a["key"]: next(iter(a["value"].values())) for a in point["attributes"]}
    assert attrs[sc.GEN_AI_OPERATION_NAME] == "chat" and attrs[sc.GEN_AI_REQUEST_MODEL] == "scripted-model"
    types = sorted(next(a["value"]["stringValue"] for a in p["attributes"] if a["key"] == sc.GEN_AI_TOKEN_TYPE)
                   for p in tokens["histogram"]["dataPoints"])
    assert types == ["input", "output"]
    report = report_from_files([str(tmp_path)])  # the folder holds both files
    assert report.problems == [] and len(report.tasks) == 1
