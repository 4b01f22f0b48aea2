"""ClickHouse as a trace source and target (issue 17), against ClickHouse's own engine in-process
(chdb) over a table made with the OpenTelemetry Collector exporter's DDL: our files exported into
it report what the files report; the filters and the batches run in SQL; a wrong table or an
unreachable server is a clear error. (Debian's clickhouse-server is 18.16, older than the Map
type the schema needs, and PyPI has no server: no test runs against a server process.)"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from agenttrace.cli import main
from agenttrace.errors import ClickHouseError
from agenttrace.report import report_from_files
from agenttrace.report.build import report_clickhouse
from agenttrace.traces.clickhouse import ClickHouseQuery, check_table, connect
from agenttrace.traces.clickhouse_export import as_string, export_spans, row_of
from agenttrace.traces.clickhouse_read import read_traces, trace_pages, typed_value
from agenttrace.traces.otlp_file import read_spans

pytest.importorskip("chdb")
SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def figures(report) -> dict:
    data = report.model_dump()
    for key in ("sources", "inputs", "problems"):
        data.pop(key)
    return data


@pytest.fixture
def store_url(tmp_path):
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(SAMPLES), "--clickhouse", url]) == 0
    return url


def test_exported_files_report_from_clickhouse_as_from_the_files(store_url, capsys):
    files = report_from_files([str(SAMPLES)])
    stored = report_clickhouse(ClickHouseQuery(store_url, "otel_traces", batch_traces=1))  # a batch per trace
    assert stored.problems == [] and len(stored.tasks) == len(files.tasks) == 8
    assert figures(stored) == figures(files)
    (seen,) = stored.inputs
    assert seen.source.startswith(store_url) and seen.spans == sum(i.spans for i in files.inputs)
    capsys.readouterr()
    assert main(["report", "--clickhouse", store_url, "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tasks"]) == 8


def test_filters_run_in_sql_on_whole_traces(store_url):
    store = connect(store_url)
    first = store.rows("SELECT toUnixTimestamp64Nano(min(Timestamp)), toUnixTimestamp64Nano(max(Timestamp)) "
                       "FROM otel_traces")[0]
    starts = sorted(r[0] for r in store.rows(
        "SELECT toUnixTimestamp64Nano(min(Timestamp)) FROM otel_traces GROUP BY TraceId"))
    late = report_clickhouse(ClickHouseQuery(store_url, since_ns=starts[4]))
    assert len(late.tasks) == 4  # the traces with a span at or after the fifth trace's start
    assert all(t.wall_s > 0 and t.steps for t in late.tasks)  # fetched whole, not cut at the window
    early = report_clickhouse(ClickHouseQuery(store_url, until_ns=starts[1]))
    assert len(early.tasks) == 1
    assert report_clickhouse(ClickHouseQuery(store_url, service="no-such-service")).tasks == []
    assert first[0] <= starts[0]


def test_a_table_of_another_schema_is_named_with_what_it_lacks(tmp_path):
    store = connect(f"chdb:{tmp_path / 'ch'}")
    store.command("CREATE TABLE spans (TraceId String, SpanId String, Timestamp DateTime64(9)) ENGINE = MergeTree "
                  "ORDER BY Timestamp")
    with pytest.raises(ClickHouseError, match=r"spans is not the OpenTelemetry exporter's traces table: it has no "
                                              r"ParentSpanId, SpanName"):
        check_table(store, "spans")
    with pytest.raises(ClickHouseError, match="no table nowhere"):
        check_table(store, "nowhere")
    with pytest.raises(ClickHouseError, match="expected a name"):
        check_table(store, "x; DROP TABLE spans")


def test_the_command_line_says_what_is_wrong_and_exits_2(tmp_path, capsys):
    assert main(["report", "--clickhouse", f"chdb:{tmp_path / 'empty'}", "--table", "otel_traces"]) == 2
    assert "no table otel_traces" in capsys.readouterr().err
    assert main(["report", "--clickhouse", "http://127.0.0.1:9", "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "http://127.0.0.1:9" in err and "cannot connect" in err
    assert main(["report", "--clickhouse", "ftp://x"]) == 2
    assert "http(s)://" in capsys.readouterr().err
    assert main(["report", "--clickhouse", f"chdb:{tmp_path / 'e'}", "--since", "yesterday-ish"]) == 2
    assert "lookback" in capsys.readouterr().err


def test_rows_are_the_exporters_and_values_come_back_typed():
    spans = read_spans([str(SAMPLES / "demo-speculative.jsonl")]).spans
    gen = next(s for s in spans if s.name.startswith("chat "))
    row = row_of(gen)
    assert row["SpanKind"] == "SPAN_KIND_INTERNAL" and row["StatusCode"].startswith("STATUS_CODE_")
    assert all(isinstance(v, str) for v in row["SpanAttributes"].values())  # the schema's strings
    assert len(row["TraceId"]) == 32 and row["Timestamp"].count(".") == 1 and len(row["Timestamp"].split(".")[1]) == 9
    assert as_string(True) == "true" and as_string(0.1) == "0.1" and as_string(1e-07) == "0.0000001"
    assert as_string([1, 2]) == "[1,2]" and as_string(12) == "12"
    for key, value in gen.attributes.items():
        back = typed_value(key, as_string(value))
        assert back == (list(value) if isinstance(value, tuple) else value), key


def test_a_value_of_the_wrong_type_is_a_problem_naming_the_span_and_the_rest_is_read(tmp_path):
    url = f"chdb:{tmp_path / 'ch'}"
    store = connect(url)
    export_spans(store, "otel_traces", read_spans([str(SAMPLES / "demo-baseline.jsonl")]).spans)
    store.command("INSERT INTO otel_traces (Timestamp, TraceId, SpanId, SpanName, Duration, SpanAttributes) VALUES "
                  "(now64(9), 'ff', 'ee', 'odd', 1, map('agenttrace.step.index', 'three'))")
    problems: list[str] = []
    spans = [s for batch in read_traces(store, ClickHouseQuery(url), problems) for s in batch]
    assert len(spans) > 10
    (problem,) = problems
    assert f"{url} otel_traces: span ee: agenttrace.step.index is str 'three', not an integer" in problem


def _with_attribute(path: Path, key: str, value: str) -> Path:
    """demo-baseline.jsonl with one more string attribute on every span."""
    lines = []
    for line in (SAMPLES / "demo-baseline.jsonl").read_text().splitlines():
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span.setdefault("attributes", []).append({"key": key, "value": {"stringValue": value}})
        lines.append(json.dumps(doc))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_attribute_of_100k_nested_brackets_reports_from_clickhouse_as_from_the_file(tmp_path, capsys):
    deep = _with_attribute(tmp_path / "deep.jsonl", "agenttrace.note", "[" * 100_000 + "]" * 100_000)
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(deep), "--clickhouse", url]) == 0
    stored = report_clickhouse(ClickHouseQuery(url))  # was a RecursionError in typed_value
    files = report_from_files([str(deep)])
    assert stored.problems == [] and len(stored.tasks) == len(files.tasks) == 4
    assert figures(stored) == figures(files)
    capsys.readouterr()
    assert main(["report", "--clickhouse", url, "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tasks"]) == 4


def test_typed_value_never_recurses_or_raises_on_hostile_text():
    deep = "[" * 100_000 + "]" * 100_000
    assert typed_value("x", deep) == deep
    assert typed_value("x", "[" * 32 + "]" * 32) == eval("[" * 32 + "]" * 32)  # as deep as the file reader keeps
    assert typed_value("x", "[" * 33 + "]" * 33) == "[" * 33 + "]" * 33
    assert typed_value("x", '["' + "[" * 500 + '", "\\"]"]') == ["[" * 500, '"]']  # brackets in strings don't nest
    assert typed_value("x", "[1, {" + '"a": ' * 1 + "[2]}]") == [1, {"a": [2]}]
    assert typed_value("x", "7" * 5000) == "7" * 5000  # int() refuses 4,300 digits
    assert typed_value("x", "[" + "7" * 5000 + "]") == "[" + "7" * 5000 + "]"
    assert typed_value("x", "-12") == -12 and typed_value("x", "[1,2]") == [1, 2]


def _ns(iso: str) -> int:
    from datetime import UTC, datetime

    return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()) * 1_000_000_000


def _traces(url: str, **query) -> int:
    """How many traces the query picks (the SQL alone, no report)."""
    return sum(len(ids) for ids in trace_pages(connect(url), ClickHouseQuery(url, **query)))


def test_time_bounds_past_what_a_datetime64_holds_do_not_flip(store_url):
    tasks = partial(_traces, store_url)

    assert tasks(since_ns=_ns("2300-01-01")) == 0  # was 8: the Int64 wrapped to 1677
    assert tasks(until_ns=_ns("2300-01-01")) == 8  # was 0
    assert tasks(since_ns=_ns("2262-04-12")) == 0 and tasks(until_ns=_ns("2262-04-12")) == 8
    assert tasks(since_ns=_ns("1600-01-01")) == 8 and tasks(until_ns=_ns("1600-01-01")) == 0
    assert tasks(since_ns=_ns("1700-01-01"), until_ns=_ns("2200-01-01")) == 8
    assert tasks(since_ns=2**63 - 1) == 0 and tasks(until_ns=-(2**63)) == 0 and tasks(since_ns=-(2**63)) == 8


def test_a_batch_past_what_limit_holds_reads_every_trace(store_url, capsys):
    for n in (2**32 - 1, 2**32, 2**32 + 1, 2**64, 10**30):
        assert _traces(store_url, batch_traces=n) == 8, n  # 2**32 was 0 (LIMIT's UInt32 wrapped)
    with pytest.raises(ClickHouseError, match="batch_traces"):
        ClickHouseQuery(store_url, batch_traces=0)
    capsys.readouterr()
    assert main(["report", "--clickhouse", store_url, "--batch-traces", "4294967296", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tasks"]) == 8


SERVICES = ["a\tb", "a\\Nb", "\\N", "a\\tb", "a\\b", "a'b", 'a"b', "a\nb", "a\\", "a\\\\b", "a\rb", "atb", "aNb"]


def test_a_service_name_of_any_text_picks_its_own_traces(store_url, capsys):
    """Each name on a copy of the first trace, under ids of its own; each picks its copy alone
    (a tab was BAD_QUERY_PARAMETER; a literal \\N or \\t read as N or tab, so no traces)."""
    store = connect(store_url)
    (first,) = store.rows("SELECT TraceId FROM otel_traces ORDER BY Timestamp LIMIT 1")[0]
    for i, name in enumerate(SERVICES):  # the name as hex in the SQL: no escaping in the test itself
        store.command(f"INSERT INTO otel_traces SELECT * REPLACE (concat(TraceId, '-{i}') AS TraceId, "
                      f"unhex('{name.encode().hex()}') AS ServiceName) "
                      f"FROM (SELECT * FROM otel_traces WHERE TraceId = '{first}')")
    for i, name in enumerate(SERVICES):
        problems: list[str] = []
        batches = read_traces(store, ClickHouseQuery(store_url, service=name), problems)
        assert {s.trace_id for batch in batches for s in batch} == {f"{first}-{i}"}, repr(name)
        assert problems == []
    capsys.readouterr()
    assert main(["report", "--clickhouse", store_url, "--service", "a\\Nb", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tasks"]) == 1
