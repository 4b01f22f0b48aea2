"""The benchmark's mixed inputs (bench/mixed.py): framework traces appended with fresh ids, and a
user's own spans added under ours; the columnar engine reports both as the per-span path does."""

from __future__ import annotations

import json

import pytest

from agenttrace.bench.mixed import FRAMEWORKS, add_own_spans, append_foreign
from agenttrace.bench.synthetic import generate


def _trace_ids(path) -> list[str]:
    return [s["traceId"] for line in path.read_text().splitlines() if line.strip()
            for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_foreign_copies_take_fresh_trace_ids_and_user_spans_are_added(tmp_path):
    path = tmp_path / "mixed.jsonl"
    generate(path, 2_000, seed=2)
    ours = _trace_ids(path)
    framework = sum(len(_trace_ids(f)) for f in FRAMEWORKS.glob("*.jsonl"))
    assert append_foreign(path, 2) == 2 * framework
    ids = _trace_ids(path)
    assert len(ids) == len(ours) + 2 * framework
    copies = ids[len(ours):]
    assert not set(copies[:framework]) & set(copies[framework:])  # each copy its own traces
    added = add_own_spans(path, 0.1)
    assert 0.05 * len(ids) < added < 0.15 * len(ids) and len(_trace_ids(path)) == len(ids) + added


def test_the_columnar_engine_reports_the_mixed_input_as_the_per_span_path(tmp_path):
    pytest.importorskip("chdb")
    from agenttrace.columnar.engine import report_files
    from agenttrace.report.build import report_streamed

    path = tmp_path / "mixed.jsonl"
    generate(path, 2_000, seed=2)
    add_own_spans(path, 0.1)
    append_foreign(path, 1)
    outcome = report_files([path], threads=1)
    assert outcome.per_trace_spans > 1_000
    assert outcome.report.model_dump_json() == report_streamed([str(path)]).model_dump_json()


def test_long_horizon_copies_are_reported_by_the_queries(tmp_path):
    # compactions, memory and sub-agents side by side: every task from the queries
    # (columnar/runs_sql.py, tree.dfs_key), the per-span report
    pytest.importorskip("chdb")
    from agenttrace.bench.mixed import append_copies, long_horizon_lines
    from agenttrace.columnar.engine import report_files
    from agenttrace.report.build import report_streamed

    path = tmp_path / "long.jsonl"
    generate(path, 2_000, seed=2)
    ours = len(_trace_ids(path))
    assert append_copies(path, long_horizon_lines(), 3) == 3 * 68 == len(_trace_ids(path)) - ours
    outcome = report_files([path], threads=1)
    assert outcome.per_span_tasks == 0
    assert outcome.report.model_dump_json() == report_streamed([str(path)]).model_dump_json()
