"""A store's spans into the span table: the input order sorted on the keys and each row's place
(a MergeTree's part and offset) is the order sorted with every column, and a row that order did
not place (a merge between the statement's two reads of the table) sends the load to the whole
sort, with the same report."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("chdb")

from agenttrace.bench.synthetic import generate
from agenttrace.columnar import load
from agenttrace.columnar.engine import Engine
from agenttrace.errors import ClickHouseError
from agenttrace.report.build import report_clickhouse
from agenttrace.traces.clickhouse import ClickHouseQuery, check_table, connect
from agenttrace.traces.clickhouse_export import export_spans
from agenttrace.traces.otlp_file import iter_spans

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """The samples and synthetic traces, exported in three inserts (three parts, until merged;
    the synthetic file's halves split traces across parts)."""
    folder = tmp_path_factory.mktemp("store-load")
    url = f"chdb:{folder / 'ch'}"
    generate(folder / "s.jsonl", 3_000, seed=1)
    problems: list[str] = []
    lines = list(iter_spans([folder / "s.jsonl"], problems))
    for part in ([s for line in iter_spans([SAMPLES], problems) for s in line],
                 [s for line in lines[: len(lines) // 2] for s in line], [s for line in lines[len(lines) // 2:] for s in line]):
        export_spans(connect(url), "otel_traces", iter(part))
    assert problems == []
    return url


def _table(store: str, by_row: bool) -> list[tuple]:
    engine = Engine(store=connect(store))
    engine.q(load.table())
    engine.q(load.store_insert("otel_traces", "", load.MERGE_TREE_ROWS if by_row else None))
    rows = engine.store.rows("SELECT i, h, trace_id, span_id, attrs, odd FROM spans ORDER BY i")
    engine.q("DROP TEMPORARY TABLE spans")
    return [tuple(map(str, r)) for r in rows]


def test_the_row_keyed_order_is_the_whole_sorts(store):
    assert check_table(connect(store), "otel_traces") == "MergeTree"
    parts = connect(store).rows("SELECT uniqExact(_part) FROM otel_traces")[0][0]
    by_row, whole = _table(store, True), _table(store, False)
    assert len(by_row) > 3_000 and parts == 3
    assert [r[0] for r in by_row] == [str(n) for n in range(len(by_row))]  # every row placed, in order
    assert by_row == whole


class _MovedRows:
    """The store, with the order's read of the table missing half its rows (as a merge between
    the two reads would leave them unmatched)."""

    def __init__(self, real) -> None:
        self.real, self.statements = real, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def command(self, sql, params=None):
        self.statements.append(sql)
        if ") AS ord ON" in sql:
            sql = sql.replace(") AS ord ON", " WHERE cityHash64(o.SpanId) % 2 = 0) AS ord ON")
        return self.real.command(sql, params)


def _report(store: str, wrapper) -> tuple[object, list[str], str]:
    """The columnar report of the whole store through `wrapper` around it; the report's Outcome,
    the statements it saw, and the per-span path's JSON of the same traces."""
    query = ClickHouseQuery(store)
    wrapped = wrapper(connect(store))
    engine = Engine(1, wrapped)
    outcome = engine.figures([query.describe()], engine.load_store(query), [], None)
    assert outcome.reason is None, outcome.reason
    return outcome, wrapped.statements, report_clickhouse(query).model_dump_json()


def test_a_row_the_order_did_not_place_reads_the_store_again_sorted_whole(store):
    outcome, statements, ref = _report(store, _MovedRows)
    inserts = [s for s in statements if s.startswith("INSERT INTO spans")]
    assert len(inserts) == 2 and ") AS ord ON" in inserts[0] and ") AS ord ON" not in inserts[1]
    assert "TRUNCATE TABLE spans" in statements
    assert outcome.report.model_dump_json() == ref


class _OldServer(_MovedRows):
    """The store, refusing the rows' part and offset as a server before them would."""

    def command(self, sql, params=None):
        if "_part_offset" in sql:
            self.statements.append(sql)
            raise ClickHouseError("Code: 47. DB::Exception: Missing columns: '_part_offset' (UNKNOWN_IDENTIFIER)")
        return super().command(sql, params)


def test_a_server_without_the_rows_part_and_offset_gets_the_order_sorted_whole(store):
    outcome, statements, ref = _report(store, _OldServer)
    inserts = [s for s in statements if s.startswith("INSERT INTO spans")]
    assert len(inserts) == 2 and "_part_offset" in inserts[0] and "_part_offset" not in inserts[1]
    assert outcome.report.model_dump_json() == ref


@pytest.mark.parametrize("by_row", [True, False])
def test_a_stores_batches_hold_whole_traces_in_the_whole_inputs_order(store, by_row):
    engine = Engine(store=connect(store))
    numbers = engine.store_batches(ClickHouseQuery(store), 700)
    engine._read = (load.MERGE_TREE_ROWS if by_row else None, *engine._read[1:])
    rows, sizes = [], []
    for number in numbers:
        engine.drop(["spans"])
        engine.load_store_batch(number)
        batch = engine.store.rows("SELECT i, h, trace_id, span_id, attrs, odd FROM spans ORDER BY i")
        rows += [tuple(map(str, r)) for r in batch]
        sizes.append(len(batch))
    assert len(numbers) >= 5 and max(sizes) < 700 + 200  # a batch: about 700 spans, whole traces
    assert rows == _table(store, True)


def test_a_stores_summary_is_made_a_batch_of_traces_at_a_time(store, monkeypatch):
    # traces in input order, a few hundred spans a batch (none split): the one table's figures,
    # and what the store held (inputs), with the store's filters
    from agenttrace.columnar import batches
    from agenttrace.columnar.engine import report_store

    loaded: list[int] = []
    monkeypatch.setattr(Engine, "load_store_batch", lambda self, b, f=Engine.load_store_batch: loaded.append(b) or f(self, b))
    starts = sorted(r[0] for r in connect(store).rows(
        "SELECT toUnixTimestamp64Nano(min(Timestamp)) FROM otel_traces GROUP BY TraceId"))
    for query in (ClickHouseQuery(store, service="bench-agent"), ClickHouseQuery(store, since_ns=starts[40])):
        monkeypatch.setattr(batches, "BATCH_SPANS", 10**9)
        whole = report_store(query, threads=1, sample=100)
        assert whole.reason is None and loaded == []
        monkeypatch.setattr(batches, "BATCH_SPANS", 1_200)
        batched = report_store(query, threads=1, sample=100)
        assert batched.reason is None and len(loaded) >= 2, batched.reason
        assert batched.report.model_dump_json() == whole.report.model_dump_json()
        assert "made in the engine" in batched.report.problems[-1] and batched.report.inputs[0].spans > 2_000
        loaded.clear()
    assert [r[0] for r in connect(store).rows("SHOW TABLES")] == ["otel_traces"]
