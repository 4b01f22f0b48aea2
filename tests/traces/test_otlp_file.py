"""Trace files read back as SDK spans: re-encoding them gives the recorded OTLP, field for field."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from recorded_runs import LINKED, REMOTE_SPAN_ID, REMOTE_TRACE_ID, record_agent_run
from shared_fixtures import shared_fixture

from agenttrace.traces.otlp_file import read_spans, spans_from_request

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "traces" / "samples").glob("*.jsonl"))


def _reencode(src: Path, dst: Path) -> None:
    """Each line of `src` read as SDK spans and written again by the official JSON file exporter."""
    exporter = FileSpanExporter(dst)
    for line in src.read_text().splitlines():
        if line.strip():
            exporter.export(list(spans_from_request(json.loads(line))))
    exporter.shutdown()


def test_reencoding_a_recorded_file_gives_back_the_same_otlp(tmp_path):
    recorded = tmp_path / "run.jsonl"
    record_agent_run(recorded, detail="fine")
    for src in [recorded, *SAMPLES]:
        dst = tmp_path / f"again-{src.name}"
        _reencode(src, dst)
        original = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
        again = [json.loads(line) for line in dst.read_text().splitlines()]
        assert again == original, src


def test_spans_keep_remote_parent_trace_state_links_kind_and_status(tmp_path):
    path = tmp_path / "run.jsonl"
    record_agent_run(path)
    result = read_spans([path])
    assert result.problems == [] and result.files == [path]
    (server,) = [s for s in result.spans if s.name == "handle request"]
    assert server.context.trace_id == REMOTE_TRACE_ID
    assert server.parent.span_id == REMOTE_SPAN_ID and server.parent.is_remote
    assert dict(server.context.trace_state) == {"vendor": "v1"}
    assert server.kind is SpanKind.SERVER and server.status.status_code is StatusCode.OK
    (link,) = server.links
    assert (link.context.trace_id, link.context.span_id) == (LINKED.trace_id, LINKED.span_id)
    assert dict(link.attributes) == {"link.reason": "batch"}
    assert server.attributes["big.number"] == 2**60
    assert server.instrumentation_scope.name == "agenttrace"
    assert server.resource.attributes["service.name"] == "replay-test"
    # spans that shared a resource in the file share one Resource object again
    assert len({id(s.resource) for s in result.spans}) == 1
    errors = [s for s in result.spans if s.status.status_code is StatusCode.ERROR]
    assert {s.name for s in errors} == {"attempt 1", "parse_tool_call"}
    assert all(s.status.description for s in errors)
    (chat,) = [s for s in result.spans if s.name == "chat scripted-model" and s.events]
    assert [e.name for e in chat.events] == ["speculate.round", "speculate.round"]
    assert len(result.trace_ids) == 2


def test_upper_case_ids_numeric_times_and_a_whole_file_request_are_read():
    result = read_spans([shared_fixture("otlp-trace-example.json")])
    assert result.problems == []
    (span,) = result.spans
    assert f"{span.context.trace_id:032x}" == "5b8efff798038103d269b633813fc60c"
    assert f"{span.parent.span_id:016x}" == "eee19b7ec3c1b173"
    assert span.start_time == 1544712660000000000 and span.end_time == 1544712661000000000
    assert span.kind is SpanKind.SERVER
    assert span.instrumentation_scope.version == "1.0.0"
    assert dict(span.instrumentation_scope.attributes) == {"my.scope.attribute": "some scope attribute"}


def test_broken_lines_are_reported_with_file_and_line_and_the_rest_is_read(tmp_path):
    path = tmp_path / "run.jsonl"
    record_agent_run(path)
    lines = path.read_text().splitlines()
    bad_id = json.loads(lines[0])
    bad_id["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "xyz"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([lines[0], "{not json", json.dumps(bad_id), "[1, 2]", *lines[1:]]) + "\n")
    result = read_spans([broken, tmp_path / "missing.jsonl"])
    assert len(result.spans) == len(read_spans([path]).spans) == 18
    assert len(result.problems) == 4
    assert result.problems[0].startswith(f"{broken}:2: not valid JSON")
    assert result.problems[1].startswith(f"{broken}:3: malformed OTLP span data")
    assert "spanId 'xyz'" in result.problems[1]
    assert result.problems[2].startswith(f"{broken}:4: not an OTLP ExportTraceServiceRequest")
    assert result.problems[3] == f"{tmp_path / 'missing.jsonl'}: no such file"
