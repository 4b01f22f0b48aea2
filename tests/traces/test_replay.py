"""Replaying trace files to OTLP receivers (in-process, on loopback): every span arrives with its
original ids, parent, times and content, in batches, retried, counted; failures say why, fast."""

from __future__ import annotations

import json
import socket
import time

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from otlp_receiver import grpc_receiver, http_receiver
from recorded_runs import record_agent_run

from agenttrace.cli import main
from agenttrace.errors import ReplayError
from agenttrace.telemetry.exporters import resolve_otlp_endpoint
from agenttrace.traces.otlp_file import read_spans
from agenttrace.traces.replay import replay_spans

N_SPANS = 18


@pytest.fixture
def recorded(tmp_path):
    path = tmp_path / "run.jsonl"
    record_agent_run(path)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _expected(path):
    """The file's spans as the OTLP protobuf the exporter must send (the encoder's own output)."""
    spans = read_spans([path]).spans
    return [span for rs in encode_spans(spans).resource_spans for ss in rs.scope_spans for span in ss.spans]


@pytest.mark.parametrize("receiver", [http_receiver, grpc_receiver], ids=["http", "grpc"])
def test_replay_delivers_every_span_exactly_in_batches(recorded, receiver):
    protocol = "grpc" if receiver is grpc_receiver else "http/protobuf"
    with receiver() as (url, received):
        result = replay_spans(read_spans([recorded]).spans, url, protocol, batch_size=5)
    assert (result.spans_sent, result.batches) == (N_SPANS, 4)
    assert [sum(len(ss.spans) for rs in r.resource_spans for ss in rs.scope_spans) for r in received.requests] == [
        5, 5, 5, 3
    ]
    got = [span for _, _, span in received.spans()]
    expected = _expected(recorded)
    assert got == expected  # protobuf equality: ids, parent, times, attributes, events, links, status...
    # and against the file itself, independently of our reader
    by_id = {s.span_id.hex(): s for s in got}
    for line in recorded.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    sent = by_id[s["spanId"]]
                    assert sent.trace_id.hex() == s["traceId"]
                    assert sent.parent_span_id.hex() == s.get("parentSpanId", "")
                    assert sent.start_time_unix_nano == int(s["startTimeUnixNano"])
                    assert sent.end_time_unix_nano == int(s["endTimeUnixNano"])
                    assert sent.name == s["name"] and sent.kind == s["kind"]
    resources = {resource for resource, _, _ in received.spans()}
    assert len(resources) == 1  # one resource, as recorded


def test_a_transient_refusal_is_retried_and_everything_arrives(recorded):
    with http_receiver() as (url, received):
        received.statuses = [503, 429]
        result = replay_spans(read_spans([recorded]).spans, url, batch_size=100)
    assert result.spans_sent == N_SPANS and received.attempts == 3 and len(received.requests) == 1


def test_a_refused_batch_stops_the_replay_and_says_how_many_went(recorded):
    with http_receiver() as (url, received):
        received.statuses = [200, 400]
        with pytest.raises(ReplayError) as info:
            replay_spans(read_spans([recorded]).spans, url, batch_size=10)
    message = str(info.value)
    assert info.value.spans_sent == 10 and len(received.requests) == 1
    assert f"{url} did not accept batch 2 (8 spans)" in message
    assert "code: 400" in message and "10 of 18 spans were accepted;" in message


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_an_unreachable_endpoint_fails_fast_with_a_clear_error(recorded, protocol):
    url = f"http://127.0.0.1:{_free_port()}"
    started = time.perf_counter()
    with pytest.raises(ReplayError) as info:
        replay_spans(read_spans([recorded]).spans, url, protocol)
    assert time.perf_counter() - started < 2.0
    message = str(info.value)
    assert info.value.spans_sent == 0
    assert f"cannot reach the OTLP {protocol} endpoint {url}" in message and "nothing was sent" in message
    assert "Jaeger" in message and ("4317" if protocol == "grpc" else "4318") in message


def test_an_endpoint_that_stops_answering_is_bounded_by_the_timeout(recorded):
    # Something accepts connections but never answers: the exporter's own timeout ends it.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.perf_counter()
        with pytest.raises(ReplayError) as info:
            replay_spans(read_spans([recorded]).spans, url, timeout_s=1.0)
        assert time.perf_counter() - started < 5.0
    assert "0 of 18 spans were accepted" in str(info.value)


def test_export_command_replays_and_counts(recorded, capsys):
    with http_receiver() as (url, received):
        assert main(["export", str(recorded), "--otlp", url, "--batch-size", "7"]) == 0
    out = capsys.readouterr().out
    assert f"sent 18 spans (2 traces) to {url} over http/protobuf in 3 batch(es)" in out
    assert len(received.spans()) == 18


def test_export_command_sends_what_it_can_read_and_reports_the_rest(recorded, tmp_path, capsys):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(recorded.read_text() + "{oops\n")
    with grpc_receiver() as (url, received):
        # issue 19: partial inputs exit 0 with the skipped lines listed (2 only when nothing is usable)
        assert main(["export", str(broken), "--otlp", url, "--otlp-protocol", "grpc"]) == 0
    captured = capsys.readouterr()
    assert f"skipped {broken}:{N_SPANS + 1}: not valid JSON" in captured.err
    assert "sent 18 spans" in captured.out and len(received.spans()) == 18


def test_export_command_to_a_dead_endpoint_exits_1_with_the_reason(recorded, capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["export", str(recorded), "--otlp", url]) == 1
    assert f"cannot reach the OTLP http/protobuf endpoint {url}" in capsys.readouterr().err


def test_export_command_usage_errors(recorded, capsys):
    assert main(["export", str(recorded)]) == 2
    assert "--otlp [URL], --jaeger-json OUT and/or --clickhouse URL" in capsys.readouterr().err
    assert main(["export", "nope.jsonl", "--otlp"]) == 2
    assert "no such file or folder: nope.jsonl" in capsys.readouterr().err


def test_bare_otlp_flag_follows_the_standard_variables_then_jaeger(monkeypatch):
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(var, raising=False)
    assert resolve_otlp_endpoint("", "grpc") == ("http://localhost:4317", "grpc")
    assert resolve_otlp_endpoint("collector:4317", "grpc") == ("http://collector:4317", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://otel.example:4318")
    assert resolve_otlp_endpoint("", None) == ("https://otel.example:4318", "http/protobuf")
