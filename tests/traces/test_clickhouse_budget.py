"""A read of ClickHouse stays within the bounds of one remote read (issue 31): a request budget,
a byte budget and a deadline cut a read with a problem saying what was cut and which option
raises it, and the report covers what was read before; every query carries what is left of the
deadline to the server (`max_execution_time`) and the HTTP client's timeouts; a page of spans
over one answer's bound is asked again for half as many traces, and a trace over it alone is
skipped by name. Against ClickHouse's engine in-process (chdb), a recording store around it, and
a stand-in for the official client."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from agenttrace.cli import main
from agenttrace.clock import FakeClock
from agenttrace.errors import ClickHouseError
from agenttrace.report.build import report_clickhouse
from agenttrace.traces import clickhouse
from agenttrace.traces.bounded_http import ReadLimits
from agenttrace.traces.clickhouse import ClickHouseQuery, QueryAnswer, QueryBounds, connect
from agenttrace.traces.clickhouse_read import read_traces

pytest.importorskip("chdb")
SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"
TRACES = 8  # in the samples; read one a page (batch_traces=1): id page, span page, ... and a last empty id page


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    url = f"chdb:{tmp_path_factory.mktemp('ch') / 'ch'}"
    assert main(["export", str(SAMPLES), "--clickhouse", url]) == 0
    return url


@pytest.fixture(scope="module")
def store(store_url):
    return connect(store_url)


class Recording:
    """A store around another: each query's SQL, parameters and bounds, its answer's size, and
    `seconds` of a fake clock passing per query (raising ClickHouseError when `timeout` says so)."""

    def __init__(self, inner, clock: FakeClock | None = None, seconds: float = 0.0, timeout: bool = False) -> None:
        self.inner, self.name, self.clock, self.seconds, self.timeout = inner, inner.name, clock, seconds, timeout
        self.asked: list[tuple[str, dict[str, Any], QueryBounds, QueryAnswer]] = []

    def rows(self, sql, params=None):
        return self.inner.rows(sql, params)

    def answer(self, sql, params, bounds):
        if self.clock is not None:
            self.clock.advance_s(self.seconds)
        if self.timeout:
            raise ClickHouseError(f"{self.name}: Code: 159. DB::Exception: Timeout exceeded (TIMEOUT_EXCEEDED)")
        got = self.inner.answer(sql, params, bounds)
        self.asked.append((sql, dict(params or {}), bounds, got))
        return got


def read(store, url: str, **query) -> tuple[list[str], list[str]]:
    """The trace ids read (in order) and the problems."""
    problems: list[str] = []
    clock = query.pop("clock", None)
    batches = list(read_traces(store, ClickHouseQuery(url, **query), problems, clock=clock))
    return list(dict.fromkeys(s.trace_id for b in batches for s in b)), problems


def sizes(store, url: str, batch_traces: int = 1) -> list[int]:
    rec = Recording(store)
    ids, problems = read(rec, url, batch_traces=batch_traces)
    assert len(ids) == TRACES and problems == []
    return [a.nbytes for _, _, _, a in rec.asked]


def test_the_request_budget_cuts_a_read_and_the_report_covers_what_was_read(store, store_url, capsys):
    ids, problems = read(store, store_url, batch_traces=1, limits=ReadLimits(max_requests=5))
    assert len(ids) == 2  # ids, spans, ids, spans, ids: the fifth request is the last
    (line,) = problems
    assert line.startswith(f"{store_url} otel_traces: the budget of 5 requests is spent (raise it with --max-requests); "
                           "the report covers the 2 trace(s) read before (5 requests, ")
    assert main(["report", "--clickhouse", store_url, "--batch-traces", "1", "--max-requests", "5",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["tasks"]) == 2 and any("--max-requests" in p for p in doc["problems"])
    assert main(["report", "--clickhouse", store_url, "--max-requests", "1"]) == 2  # nothing read: one line, exit 2
    assert "no traces read" in capsys.readouterr().err


def test_the_byte_budget_cuts_a_read_where_it_is_spent_or_mid_answer(store, store_url):
    s = sizes(store, store_url)
    ids, problems = read(store, store_url, batch_traces=1, limits=ReadLimits(max_bytes=sum(s[:3])))
    assert len(ids) == 1  # spent to the byte after the third answer: no fourth query
    assert re.search(r"the byte budget of [0-9.e-]+ MiB is spent \(raise it with --max-mb\); the report covers the 1 "
                     r"trace\(s\) read before \(3 requests", problems[0]), problems
    ids, problems = read(store, store_url, batch_traces=1, limits=ReadLimits(max_bytes=sum(s[:4]) - 1))
    assert len(ids) == 1  # the fourth answer is one byte over what is left: not used
    assert f"an answer over the {s[3] - 1} bytes left of the byte budget" in problems[0]
    assert "(raise it with --max-mb); the report covers the 1 trace(s) read before (4 requests" in problems[0]
    report = report_clickhouse(ClickHouseQuery(store_url, batch_traces=1, limits=ReadLimits(max_bytes=sum(s[:5]))))
    assert len(report.tasks) == 2 and "--max-mb" in report.problems[-1]


def test_the_deadline_stops_before_the_next_query(store, store_url):
    clock = FakeClock()
    rec = Recording(store, clock, seconds=1.0)
    ids, problems = read(rec, store_url, batch_traces=1, limits=ReadLimits(deadline_s=2.5), clock=clock)
    assert len(rec.asked) == 3 and len(ids) == 1  # queries at 0, 1 and 2 s; at 3 s none is made
    (line,) = problems
    assert ("the deadline of 2.5 s for the whole read passed (raise it with --deadline); the report covers the 1 "
            "trace(s) read before (3 requests") in line
    ids, problems = read(store, store_url, limits=ReadLimits(deadline_s=1e-9))  # the real clock: past at once
    assert ids == [] and "the deadline of 1e-09 s" in problems[0] and "no traces read (0 requests" in problems[0]


def test_a_query_the_deadline_stops_on_the_server_is_the_deadline_line(store, store_url):
    clock = FakeClock()
    ids, problems = read(Recording(store, clock, seconds=3.0, timeout=True), store_url,
                         limits=ReadLimits(deadline_s=2.0), clock=clock)
    assert ids == [] and "the deadline of 2 s for the whole read passed (raise it with --deadline)" in problems[0]
    with pytest.raises(ClickHouseError, match="TIMEOUT_EXCEEDED"):  # the server's own limit, not ours: said as is
        read(Recording(store, clock, seconds=0.5, timeout=True), store_url, limits=ReadLimits(deadline_s=2.0),
             clock=clock)


def test_each_query_carries_what_is_left_of_the_deadline_to_the_server(store, store_url):
    clock = FakeClock()
    rec = Recording(store, clock, seconds=2.5)
    sent: list[str] = []
    chdb_query = store._query
    store._query = lambda sql, fmt, params=None: (sent.append(sql), chdb_query(sql, fmt, params))[1]
    try:
        read(rec, store_url, batch_traces=4, limits=ReadLimits(deadline_s=100), clock=clock)
    finally:
        del store._query
    assert [b.seconds for _, _, b, _ in rec.asked] == [100.0, 97.5, 95.0, 92.5, 90.0]  # 2.5 s a query
    sent = [s for s in sent if "FROM system." not in s]  # the table's check is no query of the read
    assert [int(re.search(r"max_execution_time = (\d+)", s).group(1)) for s in sent] == [100, 98, 95, 93, 90]  # whole seconds, up
    assert all("max_result_bytes = 67108864" in s and "result_overflow_mode = 'throw'" in s for s in sent)


def test_an_answer_over_the_bound_is_asked_again_for_half_as_many_traces(store, store_url):
    s = sizes(store, store_url)
    singles = s[1::2]  # each trace's spans alone
    bound = max(singles) + 100
    assert sum(singles) > bound
    rec = Recording(store)
    ids, problems = read(rec, store_url, batch_traces=TRACES, limits=ReadLimits(max_answer_bytes=bound))
    assert len(ids) == TRACES  # nothing lost
    asked = [len(p["ids"]) for _, p, _, _ in rec.asked if "ids" in p]
    assert asked[:4] == [8, 4, 2, 1] and set(asked[4:]) == {1}
    assert problems == [(f"{store_url} otel_traces: answers of 8 traces were over the bound of one answer "
                         f"({bound / 2**20:g} MiB): read 1 trace(s) a request")]


def test_a_trace_over_the_bound_alone_is_skipped_by_name(store, store_url):
    s = sizes(store, store_url)
    singles = s[1::2]
    big = singles.index(max(singles))
    bound = sorted(singles)[-2] + 1  # every trace fits but the largest
    all_ids, _ = read(store, store_url, batch_traces=1)
    ids, problems = read(store, store_url, batch_traces=2, limits=ReadLimits(max_answer_bytes=bound))
    assert ids == [t for t in all_ids if t != all_ids[big]]
    assert (f"{store_url} otel_traces: trace {all_ids[big]}: its spans are over the bound of {bound / 2**20:g} MiB "
            "for one answer (raise it with --max-answer-mb); trace skipped") in problems


class Body(io.BytesIO):
    """An answer's body that remembers how far it was read when closed."""

    read_to = -1

    def close(self) -> None:
        self.read_to = self.tell()
        super().close()


class FakeClient:
    """The official client's surface the HTTP store uses: raw_stream and its timeout."""

    def __init__(self, body: bytes = b"", error: str | None = None) -> None:
        self.body, self.error, self.calls, self.timeout, self.stream = body, error, [], "the connection's", None

    def raw_stream(self, sql, parameters=None, settings=None, fmt=None):
        self.calls.append((sql, parameters, settings, fmt, self.timeout))
        if self.error:
            raise RuntimeError(self.error)
        self.stream = Body(self.body)
        return self.stream


def test_the_http_store_passes_the_bounds_and_reads_no_more_than_the_bound():
    rows = {"meta": [], "data": [["a", 1], ["b", 2]], "rows": 2}
    body = json.dumps(rows).encode()
    client = FakeClient(body)
    http = clickhouse._Http("http://ch:8123", client)
    got = http.answer("SELECT {s:String}", {"s": "x"}, QueryBounds(seconds=12.2, max_bytes=1 << 20))
    assert got == QueryAnswer([["a", 1], ["b", 2]], len(body))
    _, params, settings, fmt, timeout = client.calls[0]
    assert params == {"s": "x"} and fmt == "JSONCompact"
    assert settings["max_execution_time"] == 13 and settings["max_result_bytes"] == 1 << 20
    assert timeout.read_timeout == 12.2 and timeout.connect_timeout == 10.0
    assert client.timeout == "the connection's"  # again after the query
    client = FakeClient(b"x" * 5_000_000)
    got = clickhouse._Http("http://ch:8123", client).answer("SELECT 1", None, QueryBounds(5.0, 1000))
    assert got.too_large and got.nbytes == 1001 and client.stream.read_to == 1001  # read one byte past, no more
    refused = clickhouse._Http("http://ch:8123", FakeClient(error="Code: 396. DB::Exception: Limit for result "
                                                            "exceeded (TOO_MANY_ROWS_OR_BYTES)"))
    assert refused.answer("SELECT 1", None, QueryBounds(5.0, 1000)).too_large
    cut = clickhouse._Http("http://ch:8123", FakeClient(body[:-5] + b"Code: 159. DB::Exception: Timeout exceeded"))
    with pytest.raises(ClickHouseError, match="not a whole JSONCompact answer.*Timeout exceeded"):
        cut.answer("SELECT 1", None, QueryBounds(5.0, 1 << 20))


class Drip(Body):
    """A server sending a byte every 50 ms."""

    def read(self, n: int = -1) -> bytes:
        time.sleep(0.05)
        return super().read(min(n, 1))


def test_the_http_store_stops_a_dripping_answer_at_what_is_left_of_the_deadline():
    client = FakeClient(b"x" * 1000)
    client.raw_stream = lambda *a, **kw: Drip(b"x" * 1000)
    with pytest.raises(ClickHouseError, match=r"^http://ch:8123: no complete answer within 0.2 s$"):
        clickhouse._Http("http://ch:8123", client).answer("SELECT 1", None, QueryBounds(0.2, 1 << 20))


def test_connecting_waits_no_longer_than_the_deadline(monkeypatch):
    clickhouse_connect = pytest.importorskip("clickhouse_connect")
    seen: dict[str, Any] = {}
    monkeypatch.setattr(clickhouse_connect, "get_client", lambda **kw: seen.update(kw) or FakeClient())
    connect("http://u:p@ch:8123/db", timeout_s=2.2)
    assert seen["send_receive_timeout"] == 3 and seen["connect_timeout"] == 3
    connect("http://ch:8123", timeout_s=600)
    assert seen["send_receive_timeout"] == 600 and seen["connect_timeout"] == 10
