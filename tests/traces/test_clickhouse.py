"""ClickHouse as a trace source and target (issue 17), against ClickHouse's own engine in-process
(chdb) over a table made with the OpenTelemetry Collector exporter's DDL: our files exported into
it report what the files report; the filters and the batches run in SQL; a wrong table or an
unreachable server is a clear error. (Debian's clickhouse-server is 18.16, older than the Map
type the schema needs, and PyPI has no server: no test runs against a server process.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenttrace.cli import main
from agenttrace.errors import ClickHouseError
from agenttrace.report import report_from_files
from agenttrace.report.build import report_clickhouse
from agenttrace.traces.clickhouse import ClickHouseQuery, check_table, connect, read_traces, typed_value
from agenttrace.traces.clickhouse_export import as_string, export_spans, row_of
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
