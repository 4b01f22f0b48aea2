"""Parquet of the ClickHouse exporter's columns (a store dumped with `SELECT * ... FORMAT Parquet`):
`agenttrace export FILE.parquet --clickhouse URL` puts it back into a store as it is, and the
report of that store is the original store's; `agenttrace report FILE.parquet` gives that report
directly, naming the file (traces/parquet_input.py)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

pytest.importorskip("chdb")
pytest.importorskip("pyarrow")

from agenttrace.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _report(capsys, url: str, engine: str) -> dict:
    assert main(["report", "--clickhouse", url, "--format", "json", "--engine", engine]) == 0
    doc = json.loads(capsys.readouterr().out)
    return {k: doc[k] for k in ("run", "tasks", "by_label", "whatif", "problems")}


def test_a_store_dumped_to_parquet_goes_back_into_a_store_and_reports_the_same(tmp_path, capsys):
    from agenttrace.traces.clickhouse import connect

    first, second = f"chdb:{tmp_path / 'a'}", f"chdb:{tmp_path / 'b'}"
    trace = ROOT / "traces" / "frameworks" / "langgraph-react-openinference.jsonl"
    assert main(["export", str(ROOT / "traces" / "samples"), str(trace), "--clickhouse", first]) == 0
    capsys.readouterr()
    dump = tmp_path / "spans.parquet"
    store = connect(first)
    store.command(f"INSERT INTO FUNCTION file('{dump}', Parquet) SELECT * FROM otel_traces")
    spans = store.rows("SELECT count() FROM otel_traces")[0][0]
    original = _report(capsys, first, "python")
    del store
    gc.collect()  # one chdb folder a process at a time

    assert main(["export", str(dump), "--clickhouse", second]) == 0
    assert capsys.readouterr().out.startswith(f"inserted {spans} spans from {dump}")
    assert _report(capsys, second, "columnar") == original == _report(capsys, second, "python")
    assert original["tasks"]


def test_a_parquet_file_is_reported_as_the_store_it_was_dumped_from(tmp_path, capsys):
    from agenttrace.traces.clickhouse import connect

    url = f"chdb:{tmp_path / 'a'}"
    trace = ROOT / "traces" / "frameworks" / "langgraph-react-openinference.jsonl"  # routed: read per span
    assert main(["export", str(ROOT / "traces" / "samples"), str(trace), "--clickhouse", url]) == 0
    capsys.readouterr()
    dump = tmp_path / "spans.parquet"
    halves = [tmp_path / "half-0.parquet", tmp_path / "half-1.parquet"]  # a data lake's parts
    store = connect(url)
    store.command(f"INSERT INTO FUNCTION file('{dump}', Parquet) SELECT * FROM otel_traces")
    for n, half in enumerate(halves):
        store.command(f"INSERT INTO FUNCTION file('{half}', Parquet) SELECT * FROM otel_traces "
                      f"WHERE cityHash64(TraceId) % 2 = {n}")
    del store
    gc.collect()  # one chdb folder a process at a time
    original = _report(capsys, url, "python")

    def report(*args: str) -> dict:
        assert main(["report", str(dump), "--format", "json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    for engine in ("columnar", "python"):
        doc = report("--engine", engine)
        assert {k: doc[k] for k in original} == original
        assert doc["sources"] == [str(dump)] and [i["source"] for i in doc["inputs"]] == [str(dump)]
    summary = report("--sample", "100")  # the summary made in the engine, as a store's
    assert summary["run"] == original["run"] and summary["tasks"] == []
    # several files: their rows as one table, the input named by all of them
    assert main(["report", *map(str, halves), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k: doc[k] for k in original} == original and doc["sources"] == [", ".join(map(str, halves))]
    # a filter applies as to a store: nothing before the first span's time, so no traces
    assert main(["report", str(dump), "--since", "2100-01-01T00:00:00Z"]) == 2
    assert "no traces in " + str(dump) in capsys.readouterr().err
    # other files with it, or a Parquet file of other columns: refused, saying why
    assert main(["report", str(dump), str(ROOT / "traces" / "samples")]) == 2
    assert "report Parquet files on their own" in capsys.readouterr().err
    other = tmp_path / "other.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"trace": ["a"], "name": ["x"]}), other)
    assert main(["report", str(other)]) == 2
    assert "not the ClickHouse exporter's traces (no Timestamp" in capsys.readouterr().err
    # the exporter's column names over values of other types, or a file cut short: said of the file
    columns = ("Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "ServiceName",
               "ResourceAttributes", "ScopeName", "SpanAttributes", "Duration", "StatusCode", "StatusMessage",
               "Events.Timestamp", "Events.Name", "Events.Attributes", "Links.TraceId", "Links.SpanId")
    pq.write_table(pa.table({c: ["x"] for c in columns}), other)
    assert main(["report", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{other}: rows that do not read as the exporter's table" in err and "chdb::" not in err
    (tmp_path / "cut.parquet").write_bytes(dump.read_bytes()[:2000])
    assert main(["report", str(tmp_path / "cut.parquet")]) == 2
    assert "not a Parquet file" in capsys.readouterr().err


def test_parquet_without_the_exporters_columns_is_refused_and_nothing_inserted(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"trace": ["a"], "name": ["x"]}), other)
    url = f"chdb:{tmp_path / 'c'}"
    assert main(["export", str(other), "--clickhouse", url]) == 2
    assert "not the ClickHouse exporter's traces" in capsys.readouterr().err
    assert main(["export", str(other), "--otlp"]) == 2  # only a store takes it as it is
    assert "--clickhouse only" in capsys.readouterr().err


def test_parquet_rows_are_ordered_on_their_keys_alone_as_a_sort_of_every_column_orders_them(tmp_path, capsys):
    # rows named by their file's place and row (clickhouse.PARQUET_ROW_KEYS), as a MergeTree
    # table's by part and offset: the span table is the one a sort of every column makes
    from agenttrace.columnar import load
    from agenttrace.columnar.engine import Engine
    from agenttrace.traces.clickhouse import PARQUET_ROW_KEYS, ClickHouseQuery, check_source, connect

    url = f"chdb:{tmp_path / 'a'}"
    assert main(["export", str(ROOT / "traces" / "samples"), "--clickhouse", url]) == 0
    capsys.readouterr()
    store = connect(url)
    parts = [tmp_path / "b.parquet", tmp_path / "a.parquet"]  # in the list's order, not the names'
    for n, part in enumerate(parts):
        store.command(f"INSERT INTO FUNCTION file('{part}', Parquet) SELECT * FROM otel_traces "
                      f"WHERE cityHash64(TraceId) % 2 = {n}")
    del store
    gc.collect()
    query = ClickHouseQuery("chdb:", files=tuple(map(str, parts)))
    engine = Engine(store=connect("chdb:"))
    assert check_source(engine.store, query) == "File"

    def table(by_row) -> list[tuple]:
        engine.drop(["spans"])
        engine.q(load.table())
        engine.q(load.store_insert(query.table, "", by_row))
        return [tuple(map(str, r)) for r in engine.store.rows("SELECT i, h, trace_id, span_id, attrs FROM spans ORDER BY i")]

    keyed, whole = table(PARQUET_ROW_KEYS), table(None)
    assert len(keyed) == 98 and [r[0] for r in keyed] == [str(n) for n in range(98)]  # every row placed
    assert keyed == whole
