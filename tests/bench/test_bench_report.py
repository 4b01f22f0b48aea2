"""`agenttrace bench report`'s synthetic traces: written as our exporter writes them, and read
back into the tasks they were made of."""

from __future__ import annotations

import json

from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

from agenttrace.bench.synthetic import BATCH, generate
from agenttrace.report.build import build_report
from agenttrace.traces.load import load_spans
from agenttrace.traces.otlp_file import spans_from_request


def test_each_line_is_what_the_official_encoder_writes(tmp_path):
    # The bench formats OTLP/JSON by hand for speed; read each line back as SDK spans and
    # encode them again with the encoder our trace-file exporter uses: the same JSON, field for field.
    path = tmp_path / "synthetic.jsonl"
    written = generate(path, 3 * BATCH, seed=1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sum(len(ss["spans"]) for line in lines for rs in line["resourceSpans"] for ss in rs["scopeSpans"]) == written
    for line in lines:
        assert encode_spans(list(spans_from_request(line))).to_dict() == line


def test_synthetic_trace_reads_back_as_its_tasks(tmp_path):
    path = tmp_path / "synthetic.jsonl"
    written = generate(path, 2000, seed=0)
    loaded = load_spans([str(path)])
    report = build_report(loaded.spans, [str(path)], loaded.problems)
    assert len(loaded.spans) == written and not report.problems
    assert {t.run_label for t in report.tasks} == {"baseline", "speculative"}
    assert all(t.outcome == "completed" and not t.partial for t in report.tasks)
    assert report.run.steps_with_retry > 0 and report.run.speculation.rounds > 0


def test_the_benchmark_prints_one_record_per_size_and_path(capsys):
    """`bench report --json`: the fast stream, the columnar engine, ClickHouse (over chdb) and the
    columnar statements inside that store, each in a fresh process, as records of the issue's keys
    (columnar: with the share of the file's bytes that came back to Python as rows)."""
    import pytest

    from agenttrace.cli import main

    pytest.importorskip("chdb")
    assert main(["bench", "report", "--spans", "1500", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["path"] for r in records] == ["fast", "columnar", "clickhouse", "clickhouse_columnar"]
    keys = {"spans", "path", "load_s", "analyse_s", "peak_mb", "file_mb"}
    assert all(set(r) == keys | ({"bytes_back_share"} if "columnar" in r["path"] else set()) for r in records)
    assert 0 < records[1]["bytes_back_share"] < 1
    assert records[3]["bytes_back_share"] == records[1]["bytes_back_share"]  # the same rows, from the store
    assert len({r["spans"] for r in records}) == 1 and records[0]["spans"] >= 1500
    assert all(r["load_s"] > 0 and r["analyse_s"] > 0 and r["peak_mb"] > 0 for r in records)


def test_the_benchmark_reports_the_store_dumped_to_parquet(capsys):
    """`--paths parquet_columnar`: `report FILE.parquet` of the store the run filled, dumped to
    Parquet; the same spans, and the same rows back as from the store itself."""
    import pytest

    from agenttrace.cli import main

    pytest.importorskip("chdb")
    pytest.importorskip("pyarrow")
    assert main(["bench", "report", "--spans", "1500", "--json", "--paths", "clickhouse_columnar,parquet_columnar"]) == 0
    store, parquet = json.loads(capsys.readouterr().out)
    assert parquet["path"] == "parquet_columnar" and parquet["spans"] == store["spans"] >= 1500
    assert parquet["bytes_back_share"] == store["bytes_back_share"] > 0
    assert parquet["analyse_s"] > 0
