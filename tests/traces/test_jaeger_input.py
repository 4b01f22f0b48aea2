"""Jaeger's JSON model in: files (with the odd cases of Jaeger's own fixture) and the query API."""

from __future__ import annotations

import json
import threading
import urllib.parse
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from shared_fixtures import shared_fixture

from agenttrace.cli import main
from agenttrace.report.span_tree import SpanTree
from agenttrace.traces.jaeger_input import JaegerQuery, query_jaeger
from agenttrace.traces.load import load_spans
from agenttrace.traces.time_window import parse_lookback


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


class _JsonAnswers(BaseHTTPRequestHandler):
    """A query API on loopback: records each request's query (`queries`) and answers the JSON
    `answer` gives for it."""

    queries: list[dict] = []

    def answer(self, query: dict) -> dict:
        raise NotImplementedError

    def do_GET(self):  # noqa: N802
        url = urllib.parse.urlparse(self.path)
        query = {"path": url.path, **dict(urllib.parse.parse_qsl(url.query))}
        type(self).queries.append(query)
        body = json.dumps(self.answer(query)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def _serving(handler: type[_JsonAnswers]):
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.queries.clear()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


class _Jaeger(_JsonAnswers):
    queries: list[dict] = []

    def answer(self, query: dict) -> dict:
        return {"data": [agent_trace_jaeger()], "total": 1, "limit": 0, "offset": 0, "errors": None}


@pytest.fixture
def jaeger_url():
    with _serving(_Jaeger) as url:
        yield url


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
    assert problem.startswith("http://127.0.0.1:9/api/traces?") and "no usable answer from Jaeger" in problem
    assert "refused" in problem and "no traces read" in problem


def test_bad_options_are_refused_before_any_request(capsys):
    assert main(["report", "--jaeger", "http://x", "--format", "json"]) == 2
    assert "--service" in capsys.readouterr().err
    with pytest.raises(ValueError, match="lookback"):
        parse_lookback("soon")


def _trace_at(i: int, start_us: int) -> dict:
    trace = agent_trace_jaeger()
    tid = f"{i:032x}"
    trace["traceID"] = tid
    for s in trace["spans"]:
        s["traceID"] = tid
        s["startTime"] = start_us + (int(s["startTime"]) - 1_000_000)
        for r in s["references"]:
            r["traceID"] = tid
        for t in s["tags"]:
            if t["key"] == "agenttrace.task.id":
                t["value"] = f"task-{i}"
    return trace


class _ManyTraces(_JsonAnswers):
    """A Jaeger holding 10 traces a minute apart that answers searches as Jaeger does: the newest
    `limit` traces with a span in [start, end]."""

    queries: list[dict] = []
    now_us = 1_800_000_000 * 10**6
    traces = [(1_800_000_000 * 10**6 - (10 - i) * 60 * 10**6, i) for i in range(10)]

    def answer(self, q: dict) -> dict:
        hits = sorted((t for t in self.traces if int(q["start"]) <= t[0] <= int(q["end"])), reverse=True)
        return {"data": [_trace_at(i, t) for t, i in hits[: int(q["limit"])]], "errors": None}


def test_large_results_are_read_page_by_page_in_time_windows():
    from agenttrace.report.build import report_jaeger
    from agenttrace.traces.jaeger_input import jaeger_pages

    with _serving(_ManyTraces) as url:
        query = JaegerQuery(url, "svc", lookback="1h", limit=0)
        problems: list[str] = []
        seen = []
        pages = list(jaeger_pages(query, problems, page_traces=3, now_s=_ManyTraces.now_us / 1e6,
                                  progress=lambda n, end: seen.append(n)))
        assert problems == []
        sizes = [len({s.trace_id for s in p}) for p in pages]
        assert max(sizes) <= 3 and sum(sizes) == 10  # never more than a page held, every trace once
        assert len({s.trace_id for p in pages for s in p}) == 10 and seen[-1] == 10
        assert all(int(q["limit"]) <= 3 for q in _ManyTraces.queries)
        ends = [int(q["end"]) for q in _ManyTraces.queries]
        assert ends == sorted(ends, reverse=True)  # walking back in time
        _ManyTraces.queries.clear()
        import time as _t

        _ManyTraces.traces = [(int(_t.time() * 1e6) - (10 - i) * 60 * 10**6, i) for i in range(10)]  # (now: the report's)
        report = report_jaeger(JaegerQuery(url, "svc", lookback="1h", limit=7), page_traces=3)
        assert len(report.tasks) == 7 and {t.task_id for t in report.tasks} == {f"task-{i}" for i in range(3, 10)}
