"""Phoenix as a trace source (`report --phoenix`), against a loopback fake of its REST API
(tests/phoenix_fake.py) that serves spans in Phoenix 20's shape: whole traces across pages and
batches give the files' figures; the window and the key reach Phoenix; a slow, dripping,
oversized, non-JSON, looping or missing answer ends in one line (exit 2), or, after something
was read, in a problem. tests/traces/test_phoenix_e2e.py reads a real Phoenix."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from phoenix_fake import as_phoenix, differences, fake_phoenix

from agenttrace.cli import main
from agenttrace.errors import PhoenixError
from agenttrace.report.build import report_phoenix, report_streamed
from agenttrace.traces.bounded_http import ReadLimits
from agenttrace.traces.load import load_spans
from agenttrace.traces.phoenix import LOST, PhoenixQuery, read_traces, span_from_phoenix

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "demo-speculative.jsonl"
FOREIGN = ROOT / "traces" / "frameworks" / "openai-agents-chat-openinference.jsonl"


@pytest.fixture
def fake():
    with fake_phoenix() as server:
        yield server


@pytest.mark.parametrize("recorded", [SAMPLE, FOREIGN], ids=["ours", "openinference"])
def test_traces_across_pages_and_batches_give_the_files_figures(fake, recorded):
    fake.add("runs", load_spans([recorded]).spans)
    query = PhoenixQuery(fake.url, "runs", batch_traces=2, page_spans=7)  # traces split over pages
    got = report_phoenix(query)
    want = report_streamed([str(recorded)])
    assert len(got.tasks) == len(want.tasks) >= 4
    assert differences(want.model_dump(mode="json"), got.model_dump(mode="json")) == []
    assert [t.run_label for t in got.tasks] == [None] * len(got.tasks)  # said, not guessed:
    assert any(LOST in p for p in got.problems)
    span_pages = [q for path, q, _ in fake.requests if path.endswith("/spans")]
    assert len(span_pages) > len(got.tasks) // 2 and all(len(q["trace_id"]) <= 2 for q in span_pages)
    assert all(q["limit"] == ["7"] for q in span_pages)


def test_the_window_goes_to_phoenixs_trace_filter(fake):
    spans = load_spans([SAMPLE]).spans
    fake.add("default", spans)
    first = {}
    for s in spans:
        first[s.trace_id] = min(first.get(s.trace_id, s.start_ns), s.start_ns)
    order = sorted(first, key=first.get)
    query = PhoenixQuery(fake.url, since_ns=first[order[1]], until_ns=first[order[3]])
    got = [s for batch in read_traces(query, []) for s in batch]
    assert {s.trace_id for s in got} == set(order[1:3])
    (path, q, _), *_ = fake.requests
    assert path == "/v1/projects/default/traces" and q["sort"] == ["start_time"] and q["order"] == ["asc"]
    assert q["start_time"][0].startswith("20") and q["end_time"][0] > q["start_time"][0]


def test_spans_keep_what_phoenix_keeps():
    spans = {s.span_id: s for s in load_spans([SAMPLE]).spans}
    gen = next(s for s in spans.values() if s.name.startswith("chat"))
    doc = as_phoenix(gen)
    assert doc["span_kind"] == "LLM"  # Phoenix's own, derived from gen_ai.operation.name
    back = span_from_phoenix(doc, "p")
    assert (back.trace_id, back.span_id, back.parent_id, back.name) == (gen.trace_id, gen.span_id, gen.parent_id,
                                                                       gen.name)
    assert abs(back.start_ns - gen.start_ns) <= 1000 and abs(back.end_ns - gen.end_ns) <= 1000
    assert back.attributes == gen.attributes  # the derived kind is left out: read as GenAI, as recorded
    assert [e.name for e in back.events] == [e.name for e in gen.events]
    assert back.kind == "UNSPECIFIED" and back.resource == {} and back.scope == "" and not back.links
    oi = span_from_phoenix({**doc, "span_kind": "CHAIN"}, "p")  # not Phoenix's: the instrumentation's
    assert oi.attributes["openinference.span.kind"] == "CHAIN"


def test_the_cli_reads_phoenix_with_project_and_key(fake, capsys, monkeypatch):
    fake.add("agents", load_spans([SAMPLE]).spans)
    fake.api_key = "s3cret"
    assert main(["report", "--phoenix", fake.url, "--project", "agents", "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTTP 401" in err and "PHOENIX_API_KEY" in err
    monkeypatch.setenv("PHOENIX_API_KEY", "s3cret")
    assert main(["report", "--phoenix", fake.url, "--project", "agents", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["tasks"]) == 4 and doc["sources"] == [f"{fake.url} project agents"]
    assert fake.requests[-1][2]["authorization"] == "Bearer s3cret"
    assert main(["report", "--phoenix", fake.url, str(SAMPLE)]) == 2
    assert "one source" in capsys.readouterr().err


def _fails(capsys, *args: str) -> str:
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_missing_project_unreachable_server_and_old_phoenix_are_one_line(fake, capsys):
    fake.add("default", [])
    fake.add("agents", load_spans([SAMPLE]).spans)
    err = _fails(capsys, "--phoenix", fake.url, "--project", "nope")
    assert "no project 'nope'" in err and "its projects: default, agents" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert "is Phoenix running there" in _fails(capsys, "--phoenix", f"http://127.0.0.1:{port}")
    assert "no traces in" in _fails(capsys, "--phoenix", fake.url)  # an empty project
    fake.old_server = True
    assert "Phoenix 13.15 or later" in _fails(capsys, "--phoenix", fake.url, "--project", "agents")
    assert "http(s)://" in _fails(capsys, "--phoenix", "localhost:6006")


def test_a_non_json_answer_is_one_line(fake, capsys):
    fake.add("default", load_spans([SAMPLE]).spans)
    fake.not_json = True
    assert "not a Phoenix API answer (not JSON" in _fails(capsys, "--phoenix", fake.url)


@pytest.mark.parametrize("how", ["delay", "drip"])
def test_a_slow_server_hits_the_deadline(fake, how):
    fake.add("default", load_spans([SAMPLE]).spans)
    if how == "delay":
        fake.delay_s = 3.0  # accepts, then says nothing
    else:
        fake.drip_s = 0.05  # a byte every 50 ms: each read is quick, the answer never ends
    started = time.monotonic()
    with pytest.raises(PhoenixError, match="within 0.5 s"):
        list(read_traces(PhoenixQuery(fake.url, timeout_s=0.5), []))
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "no-length"])
def test_an_oversized_answer_is_cut_off(fake, chunked):
    fake.add("default", load_spans([SAMPLE]).spans)
    fake.oversize, fake.chunked = 3 << 20, chunked
    with pytest.raises(PhoenixError, match="over the bound of 1 MiB"):
        list(read_traces(PhoenixQuery(fake.url, limits=ReadLimits(max_answer_bytes=1 << 20)), []))


def test_batch_and_total_bounds_say_what_to_do(fake):
    fake.add("default", load_spans([SAMPLE]).spans)
    with pytest.raises(PhoenixError, match="--batch-traces"):
        list(read_traces(PhoenixQuery(fake.url, max_batch_bytes=10_000), []))
    list(read_traces(PhoenixQuery(fake.url, batch_traces=1), []))
    whole = sum(fake.sent[1:])
    problems: list[str] = []
    batches = list(read_traces(PhoenixQuery(fake.url, batch_traces=1, limits=ReadLimits(max_bytes=whole // 2)),
                               problems))
    assert 1 <= len(batches) < 4  # what was read is reported, and the stop is said
    assert any("--max-mb" in p and "covers the" in p for p in problems)


def test_a_server_that_loops_or_ignores_the_filter_is_stopped(fake):
    fake.add("default", load_spans([SAMPLE]).spans)
    fake.stuck_cursor = True
    with pytest.raises(PhoenixError, match="same cursor twice"):
        list(read_traces(PhoenixQuery(fake.url, page_spans=3), []))
    fake.stuck_cursor, fake.ignore_trace_filter = False, True
    with pytest.raises(PhoenixError, match="ignores the trace_id filter"):
        list(read_traces(PhoenixQuery(fake.url, batch_traces=1), []))


def test_a_failure_after_the_first_batch_keeps_what_was_read(fake):
    fake.add("default", load_spans([SAMPLE]).spans)
    fake.fail_after = 3  # the listing, a batch's spans, ...then HTTP 500
    report = report_phoenix(PhoenixQuery(fake.url, batch_traces=1))
    assert 1 <= len(report.tasks) < 4
    assert any("HTTP 500" in p and "covers the" in p for p in report.problems)


def test_unreadable_spans_are_skipped_with_a_problem(fake):
    spans = load_spans([SAMPLE]).spans
    fake.add("default", spans)
    fake.projects["default"][0]["start_time"] = "yesterday"
    del fake.projects["default"][1]["context"]["span_id"]
    problems: list[str] = []
    got = [s for batch in read_traces(PhoenixQuery(fake.url), problems) for s in batch]
    assert len(got) == len(spans) - 2
    assert sum("unreadable" in p and "span skipped" in p for p in problems) == 2


def test_the_phoenix_path_never_imports_torch(fake):
    fake.add("default", load_spans([SAMPLE]).spans)
    code = ("import sys, contextlib, io; from agenttrace.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['report', '--phoenix', sys.argv[1], '--format', 'json']) == 0\n"
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
            "print('HEAVY', bad, file=sys.stderr); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code, fake.url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
