"""Remote trace sources against servers that misbehave (issue 31, items 2 and 3): a Jaeger on
loopback that drips, ignores the search window, invents new traces on every page, sends an
answer or a page larger than the bound, gives `processes` as a string or a body shorter than
its Content-Length; Phoenix under the same deadline and budgets; and the numbers of the command
line (`infh`, `1e300d`, dates past 2262). Every read ends within its bounds, the report covers
what was read and says what was cut and why, and nothing is a traceback."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from loopback import serving
from phoenix_fake import fake_phoenix

from agenttrace.cli import main
from agenttrace.clock import default_clock
from agenttrace.errors import PhoenixError
from agenttrace.traces.bounded_http import ReadLimits
from agenttrace.traces.jaeger_input import JaegerQuery, jaeger_pages, spans_from_jaeger
from agenttrace.traces.load import load_spans
from agenttrace.traces.phoenix import PhoenixQuery, read_traces
from agenttrace.traces.time_window import MAX_TIME_NS, time_ns

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "samples" / "demo-speculative.jsonl"
_MAX_REQUESTS = 60  # past this the server answers 500: the old code's endless paging ends, and fails


def _trace(i: int, start_us: int, spans: int = 5) -> dict[str, Any]:
    """An agent task as Jaeger's JSON gives it: agent, step, attempt, generation and `spans - 4`
    tool spans, all started at `start_us` (each trace id and task id from `i`)."""
    tid = f"{i + 1:032x}"

    def span(n: int, parent: int | None, name: str, segment: str, **tags: Any) -> dict[str, Any]:
        refs = [{"refType": "CHILD_OF", "traceID": tid, "spanID": f"{parent:016x}"}] if parent else []
        return {"traceID": tid, "spanID": f"{n:016x}", "operationName": name, "startTime": start_us,
                "duration": 10_000 - n, "references": refs, "processID": "p1", "logs": [],
                "tags": [{"key": "agenttrace.segment", "type": "string", "value": segment},
                         *({"key": k, "type": "string", "value": v} for k, v in tags.items())]}

    out = [span(1, None, "invoke_agent a", "agent", **{"agenttrace.task.id": f"task-{i}"}),
           span(2, 1, "agent_step 1", "step"), span(3, 2, "attempt 1", "attempt"),
           span(4, 3, "chat m", "generation")]
    out += [span(n, 3, "execute_tool t", "tool") for n in range(5, spans + 1)]
    return {"traceID": tid, "spans": out, "processes": {"p1": {"serviceName": "svc", "tags": []}}}


@dataclass
class HostileJaeger:
    """A Jaeger query API on loopback holding `traces` ((start_us, i), answered as Jaeger does:
    the newest `limit` with a span in [start, end]), with switches for the ways it goes wrong."""

    traces: list[tuple[int, int]] = field(default_factory=list)
    spans_per_trace: int = 5
    ignore_window: bool = False  # every search answered from the whole store
    new_ids: bool = False  # each answer: `limit` traces never seen, started just before the window's end
    at_end: bool = False  # ... started exactly at the window's end
    good_answers: int = 10**9  # the answers after this many misbehave as below
    delay_s: float = 0.0  # wait this long before each answer
    drip_s: float = 0.0  # send the body a byte at a time, this far apart
    pad: int = 0  # send this many bytes of padding in place of the traces
    no_length: bool = False  # no Content-Length: the body ends when the connection does
    processes: Any = None  # given in place of each trace's `processes`
    short: bool = False  # announce the whole body, send half of it, close
    requests: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def body(self, q: dict[str, str], n: int) -> bytes:
        limit, start, end = int(q["limit"]), int(q["start"]), int(q["end"])
        if self.pad and n >= self.good_answers:
            return b'{"data": [], "pad": "' + b"x" * self.pad + b'"}'
        if self.new_ids:
            found = [(end if self.at_end else end - 1 - k, 1000 * n + k) for k in range(limit)]
        else:
            found = sorted(((t, i) for t, i in self.traces if self.ignore_window or start <= t <= end), reverse=True)
        data = [_trace(i, t, self.spans_per_trace) for t, i in found[:limit]]
        if self.processes is not None and n >= self.good_answers:
            for d in data:
                d["processes"] = self.processes
        return json.dumps({"data": data, "errors": None}).encode()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        n = len(self.requests)
        self.requests.append(q)
        body = b"too many requests: the client does not stop" if n >= _MAX_REQUESTS else self.body(q, n)
        bad = n >= self.good_answers
        time.sleep(self.delay_s)
        try:
            h.send_response(500 if n >= _MAX_REQUESTS else 200)
            h.send_header("Content-Type", "application/json")
            if not (bad and self.no_length):
                h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if bad and self.drip_s:
                for i in range(len(body)):
                    h.wfile.write(body[i: i + 1])
                    h.wfile.flush()
                    time.sleep(self.drip_s)
            else:
                h.wfile.write(body[: len(body) // 2] if bad and self.short else body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader gave up, as it should
        h.close_connection = True


@contextmanager
def hostile_jaeger(**switches: Any) -> Iterator[HostileJaeger]:
    jaeger = HostileJaeger(**switches)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            jaeger.handle(self)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with serving(server):
        jaeger.url = f"http://127.0.0.1:{server.server_address[1]}"
        yield jaeger


def _now_us() -> int:
    return default_clock().now_ns() // 1000


def _store(n: int) -> list[tuple[int, int]]:
    """`n` traces a minute apart in the last hour (newest first)."""
    now = _now_us()
    return [(now - (k + 1) * 60 * 10**6, k) for k in range(n)]


def _report(capsys, url: str, *options: str) -> tuple[int, dict | None, str]:
    """(exit status, the JSON report or None, stderr) of `report --jaeger url` with `options`."""
    code = main(["report", "--jaeger", url, "--service", "svc", "--format", "json", *options])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def _cut(report: dict, *words: str) -> str:
    (line,) = [p for p in report["problems"] if all(w in p for w in words)]
    return line


def test_a_dripping_server_hits_the_deadline_of_the_whole_read(capsys):
    with hostile_jaeger(traces=_store(9), good_answers=1, drip_s=0.05) as jaeger:
        started = time.monotonic()
        code, report, _ = _report(capsys, jaeger.url, "--limit", "0", "--page-traces", "3", "--deadline", "0.8")
        assert time.monotonic() - started < 2.5  # a byte every 50 ms: no read ever waits long
    assert code == 0 and len(report["tasks"]) == 3  # the first page, read before the drip
    assert "covers the 3 trace(s)" in _cut(report, "deadline of 0.8 s for the whole read", "--deadline")


def test_a_dripping_first_answer_is_one_line(capsys):
    with hostile_jaeger(traces=_store(3), good_answers=0, drip_s=0.05) as jaeger:
        started = time.monotonic()
        code, _, err = _report(capsys, jaeger.url, "--deadline", "0.5")
        assert time.monotonic() - started < 2.0
    assert code == 2 and err.count("\n") == 1 and "--deadline" in err and "no traces read" in err


def test_the_deadline_spans_every_request_not_one():
    """Each answer is quick enough alone; the read as a whole is not."""
    with hostile_jaeger(new_ids=True, delay_s=0.15) as jaeger:
        problems: list[str] = []
        query = JaegerQuery(jaeger.url, "svc", limit=0, limits=ReadLimits(deadline_s=1.0))
        started = time.monotonic()
        pages = list(jaeger_pages(query, problems, page_traces=2))
        assert time.monotonic() - started < 2.5
    assert len(pages) >= 1 and len(jaeger.requests) < _MAX_REQUESTS
    assert any("deadline of 1 s for the whole read" in p for p in problems)


def test_a_server_ignoring_the_window_stops_at_once(capsys):
    """It answers every search with the same newest traces: `--limit 0` once paged forever."""
    with hostile_jaeger(traces=_store(20), ignore_window=True) as jaeger:
        code, report, _ = _report(capsys, jaeger.url, "--limit", "0", "--page-traces", "3")
        requests = len(jaeger.requests)
    assert code == 0 and len(report["tasks"]) == 3 and requests <= 3
    assert "covers the 3 trace(s)" in _cut(report, "does not honour the search's start and end")


def test_new_ids_on_every_page_stop_at_the_request_budget(capsys):
    with hostile_jaeger(new_ids=True) as jaeger:
        code, report, _ = _report(capsys, jaeger.url, "--limit", "0", "--page-traces", "2", "--max-requests", "5")
        requests = len(jaeger.requests)
    assert code == 0 and requests == 5 and len(report["tasks"]) == 10
    assert "covers the 10 trace(s)" in _cut(report, "budget of 5 requests is spent", "--max-requests")


def test_new_ids_on_every_page_stop_at_the_byte_budget():
    with hostile_jaeger(new_ids=True) as jaeger:
        problems: list[str] = []
        query = JaegerQuery(jaeger.url, "svc", limit=0, limits=ReadLimits(max_bytes=40_000))
        traces = sum(len({s.trace_id for s in page}) for page in jaeger_pages(query, problems, page_traces=2))
        requests = len(jaeger.requests)
    assert 1 <= requests < 20 and traces == 2 * (requests - 1)  # the last answer was cut, not parsed
    (line,) = [p for p in problems if "byte budget" in p]
    assert "--max-mb" in line and f"covers the {traces} trace(s)" in line


def test_new_ids_for_the_same_window_are_no_progress(capsys):
    with hostile_jaeger(new_ids=True, at_end=True) as jaeger:
        code, report, _ = _report(capsys, jaeger.url, "--limit", "0", "--page-traces", "2")
        requests = len(jaeger.requests)
    assert code == 0 and requests == 2 and len(report["tasks"]) == 4  # the second asked the same window
    _cut(report, "same window with new traces again and again")


@pytest.mark.parametrize("no_length", [False, True], ids=["content-length", "no-length"])
def test_a_huge_answer_is_cut_at_the_bound_not_held(capsys, no_length):
    with hostile_jaeger(traces=_store(3), good_answers=0, pad=5 << 20, no_length=no_length) as jaeger:
        code, _, err = _report(capsys, jaeger.url, "--max-answer-mb", "1", "--limit", "4")
        asked = [int(q["limit"]) for q in jaeger.requests]
    assert asked == [4, 2, 1]  # fewer traces a request, down to one
    assert code == 2 and err.count("\n") == 1
    assert "over the bound of 1 MiB for one answer (raise it with --max-answer-mb)" in err
    if no_length:  # read to one byte past the bound, then stopped
        assert "stopped reading at 1048577 bytes" in err


def test_a_huge_page_is_read_in_smaller_pages(capsys):
    """Traces of 400 spans (about 120 KB each): a page of 10 is over 1 MiB, one of 5 is not."""
    with hostile_jaeger(traces=_store(12), spans_per_trace=400) as jaeger:
        code, report, _ = _report(capsys, jaeger.url, "--limit", "0", "--page-traces", "10", "--max-answer-mb", "1")
        asked = [int(q["limit"]) for q in jaeger.requests]
    assert code == 0 and len(report["tasks"]) == 12  # every trace, none twice
    assert asked[:2] == [10, 5] and max(asked[1:]) == 5
    _cut(report, "answers of 10 traces were over the bound of one answer", "read 5 trace(s) a request")


def test_processes_as_a_string_keeps_the_spans(capsys):
    with hostile_jaeger(traces=_store(2), good_answers=0, processes="p1") as jaeger:
        code, report, _ = _report(capsys, jaeger.url)
    assert code == 0 and len(report["tasks"]) == 2
    assert len([p for p in report["problems"] if "2 trace(s) whose `processes` is a str, not an object" in p]) == 1


def test_other_shapes_are_problems_not_tracebacks():
    problems: list[str] = []
    doc = {"data": ["a trace?", {"traceID": "ab", "spans": "none"}, {"traceID": "cd", "spans": [],
                                                                   "processes": {"p1": "svc", "p2": {"tags": 5}}},
                    _trace(0, 1_000_000)], "errors": "oops"}
    deep = "[" * 100_000  # an array attribute Jaeger keeps as JSON text, nested past the parser
    doc["data"][-1]["spans"][3]["tags"].append({"key": "gen_ai.response.finish_reasons", "value": deep})
    spans = spans_from_jaeger(doc, "x", problems)
    assert len(spans) == 5 and spans[3].attributes["gen_ai.response.finish_reasons"] == deep
    assert any("1 item(s) in place of traces are not JSON objects" in p for p in problems)
    assert any("`spans` is a str, not a list" in p for p in problems)
    assert sum("process p" in p and "unreadable" in p for p in problems) == 2


@pytest.mark.parametrize("first", [True, False], ids=["first-answer", "later-answer"])
def test_a_body_shorter_than_its_length_is_one_line(capsys, first):
    with hostile_jaeger(traces=_store(6), good_answers=0 if first else 1, short=True) as jaeger:
        code, report, err = _report(capsys, jaeger.url, "--limit", "0", "--page-traces", "3")
    said = "announced (Content-Length); the answer is incomplete"
    if first:
        assert code == 2 and err.count("\n") == 1 and said in err
    else:
        assert code == 0 and len(report["tasks"]) == 3 and "covers the 3 trace(s)" in _cut(report, said)


# Phoenix: the same deadline and budgets.

@pytest.fixture
def phoenix():
    with fake_phoenix() as fake:
        fake.add("default", load_spans([SAMPLE]).spans)
        yield fake


def test_phoenix_stops_at_the_deadline_of_the_whole_read(phoenix):
    phoenix.delay_s = 0.15  # each answer well within its own timeout
    problems: list[str] = []
    started = time.monotonic()
    batches = list(read_traces(PhoenixQuery(phoenix.url, batch_traces=1, limits=ReadLimits(deadline_s=0.5)),
                               problems))
    assert time.monotonic() - started < 1.5
    assert 1 <= len(batches) < 4
    assert any("deadline of 0.5 s for the whole read" in p and "covers the" in p for p in problems)


def test_phoenix_stops_at_the_request_budget(phoenix, capsys):
    assert main(["report", "--phoenix", phoenix.url, "--batch-traces", "1", "--max-requests", "3",
                 "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(phoenix.requests) == 3 and 1 <= len(report["tasks"]) < 4
    assert "covers the" in _cut(report, "budget of 3 requests is spent", "--max-requests")


def test_phoenix_before_anything_is_read_is_one_error(phoenix):
    with pytest.raises(PhoenixError, match="over the bound of 1 MiB for one answer"):
        phoenix.oversize = 3 << 20
        list(read_traces(PhoenixQuery(phoenix.url, limits=ReadLimits(max_answer_bytes=1 << 20)), []))


# Numbers from the command line, range-checked where they are parsed.

@pytest.mark.parametrize("args", [
    ["--jaeger", "http://127.0.0.1:9", "--service", "s", "--lookback", "infh"],
    ["--jaeger", "http://127.0.0.1:9", "--service", "s", "--lookback", "1e300d"],
    ["--jaeger", "http://127.0.0.1:9", "--service", "s", "--lookback", "nanh"],
    ["--phoenix", "http://127.0.0.1:9", "--since", "infh"],
    ["--phoenix", "http://127.0.0.1:9", "--until", "1e300d"],
    ["--phoenix", "http://127.0.0.1:9", "--since=-2h"],
])
def test_a_lookback_out_of_range_is_one_line(capsys, args):
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected a length from 0 to 36500d" in err


@pytest.mark.parametrize("option,value", [("--deadline", "0"), ("--deadline", "nan"), ("--deadline", "inf"),
                                          ("--max-mb", "0"), ("--max-requests", "0"), ("--max-answer-mb", "0"),
                                          ("--limit", "-1"), ("--page-traces", "0")])
def test_bounds_out_of_range_are_one_line(capsys, option, value):
    assert main(["report", "--jaeger", "http://127.0.0.1:9", "--service", "s", option, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"agenttrace report: {option} ") and "expected" in err
    assert main(["compare", "a", "b", "--jaeger", "http://127.0.0.1:9", "--service", "s", option, value]) == 2
    assert option in capsys.readouterr().err


def test_times_are_clamped_to_what_a_span_can_carry():
    now = default_clock().now_ns() / 1e9
    assert time_ns("2300-01-01", now) == MAX_TIME_NS  # --until: no upper bound; --since: nothing
    assert time_ns("9999-12-31T23:59:59-14:00", now) == MAX_TIME_NS
    assert time_ns("1900-01-01", now) == 0 and time_ns("0001-01-01T00:00+14:00", now) == 0
    assert time_ns("2262-04-11T23:47:16.854775+00:00", now) == MAX_TIME_NS - 807
    assert time_ns("36500d", now) == 0  # a century back reaches before 1970: from the start
    assert abs(time_ns("2h", now) - (now - 7200) * 1e9) < 1e6


def test_far_future_bounds_select_as_their_edge(phoenix, capsys):
    assert main(["report", "--phoenix", phoenix.url, "--until", "2300-01-01", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tasks"]) == 4
    assert main(["report", "--phoenix", phoenix.url, "--since", "2300-01-01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no traces in" in err and "in the window" in err
