"""Jaeger's JSON model in: files (with the odd cases of Jaeger's own fixture) and the query API."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from shared_fixtures import shared_fixture

from agenttrace.cli import main
from agenttrace.report.tree import SpanTree
from agenttrace.traces.jaeger_input import JaegerQuery, parse_lookback, query_jaeger
from agenttrace.traces.load import load_spans


def test_jaegers_own_fixture_loads_with_its_odd_cases():
    loaded = load_spans([shared_fixture("jaeger-ui-trace-example.json")])
    spans = loaded.spans
    assert len(spans) == 5
    first, second = spans[0], spans[1]
    assert first.resource["service.name"] == "service-x" and spans[2].resource["service.name"] == "service-y"
    assert [(e.name, e.attributes) for e in first.events] == [("some-event", {}), ("log", {"x": "y"})]
    assert first.start_ns == 1485467191639875 * 1000 and first.end_ns - first.start_ns == 5000
    # int64 as a string, binary as base64, error=true as the status
    assert second.attributes["javascript_limit"] == 9223372036854775222
    assert second.attributes["blob"] == b"\x00\x0009" and second.status == "ERROR" and "error" not in second.attributes
    # the parent is the first CHILD_OF within the trace; the other-trace reference and FOLLOWS_FROM are links
    ref = spans[3]
    assert ref.parent_id == "0000000000000002"
    assert ref.links == [("000000000000000000000000000000ff", "00000000000000ff"),
                         ("00000000000000000000000000000001", "0000000000000002")]
    assert any("some trace warning" in p for p in loaded.problems)
    assert sum("some span warning" in p for p in loaded.problems) == 2
    # duplicate span ids: the later one is renamed, as Jaeger's UI does
    tree = SpanTree(spans)
    assert second.span_id == "0000000000000002_1" and any("appears twice" in p for p in tree.problems)
    assert [k.name for k in tree.kids(first)] == ["some-operation", "reference-test"]


def agent_trace_jaeger() -> dict:
    def tag(k, v):
        kind = "bool" if isinstance(v, bool) else "int64" if isinstance(v, int) else "float64" if isinstance(v, float) else "string"
        return {"key": k, "type": kind, "value": v}

    def span(sid, parent, name, seg, start, dur, **attrs):
        return {"traceID": "ab" * 16, "spanID": sid, "operationName": name, "startTime": start, "duration": dur,
                "references": [{"refType": "CHILD_OF", "traceID": "ab" * 16, "spanID": parent}] if parent else [],
                "tags": [tag("agenttrace.segment", seg), tag("span.kind", "internal"),
                         *(tag(k.replace("_", "."), v) for k, v in attrs.items())], "logs": [], "processID": "p1"}

    spans = [
        span("01" * 8, None, "invoke_agent a", "agent", 1_000_000, 10_000, agenttrace_task_id="j1"),
        span("02" * 8, "01" * 8, "agent_step 1", "step", 1_000_000, 10_000),
        span("03" * 8, "02" * 8, "attempt 1", "attempt", 1_000_000, 10_000),
        span("04" * 8, "03" * 8, "chat m", "generation", 1_000_000, 6_000),
        span("05" * 8, "03" * 8, "validate_arguments w", "validation", "1006000", "1000", agenttrace_validation_ok=True),
    ]
    spans[0]["tags"].append({"key": "agenttrace.task.outcome", "type": "string", "value": "completed"})
    return {"traceID": "ab" * 16, "spans": spans,
            "processes": {"p1": {"serviceName": "svc", "tags": [tag("agenttrace.run.label", "jaeger-run")]}}}


class _Jaeger(BaseHTTPRequestHandler):
    queries: list[dict] = []

    def do_GET(self):  # noqa: N802
        url = urllib.parse.urlparse(self.path)
        type(self).queries.append({"path": url.path, **dict(urllib.parse.parse_qsl(url.query))})
        body = json.dumps({"data": [agent_trace_jaeger()], "total": 1, "limit": 0, "offset": 0, "errors": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def jaeger_url():
    server = HTTPServer(("127.0.0.1", 0), _Jaeger)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Jaeger.queries.clear()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_query_api_is_read_with_service_lookback_and_limit(jaeger_url, capsys):
    assert main(["report", "--jaeger", jaeger_url, "--service", "svc", "--lookback", "2h", "--limit", "7",
                 "--format", "json"]) == 0
    (q,) = _Jaeger.queries
    assert (q["path"], q["service"], q["limit"], q["lookback"]) == ("/api/traces", "svc", "7", "2h")
    assert int(q["end"]) - int(q["start"]) == 2 * 3600 * 10**6
    data = json.loads(capsys.readouterr().out)
    (task,) = data["tasks"]
    assert (task["task_id"], task["run_label"], task["outcome"]) == ("j1", "jaeger-run", "completed")
    assert task["ttvtc_s"] == pytest.approx(0.007) and task["segments"]["generation"] == pytest.approx(0.006)


def test_unreachable_jaeger_is_a_problem_naming_the_url():
    result = query_jaeger(JaegerQuery("http://127.0.0.1:9", "svc", timeout_s=2))
    assert result.spans == []
    (problem,) = result.problems
    assert problem.startswith("http://127.0.0.1:9/api/traces?") and "cannot reach Jaeger" in problem


def test_bad_options_are_refused_before_any_request(capsys):
    assert main(["report", "--jaeger", "http://x", "--format", "json"]) == 2
    assert "--service" in capsys.readouterr().err
    with pytest.raises(ValueError, match="lookback"):
        parse_lookback("soon")
