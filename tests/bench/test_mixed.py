"""The benchmark's mixed inputs (bench/mixed.py): framework traces appended with fresh ids, a
user's own spans, client calls and the model client's spans added under ours; the columnar engine
reports each as the per-span path does."""

from __future__ import annotations

import json

import pytest

from agenttrace.bench.mixed import FRAMEWORKS, add_chat_spans, add_client_spans, add_own_spans, append_foreign
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


def _spans(path) -> list[dict]:
    return [s for line in path.read_text().splitlines() if line.strip()
            for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_client_and_chat_spans_go_under_our_calls_and_stay_with_the_queries(tmp_path):
    # an HTTP or database client span under generations and tools, the GenAI chat span under
    # generations: children inside their parents, mapped in the table (columnar/roles.py)
    pytest.importorskip("chdb")
    from agenttrace.columnar.engine import report_files
    from agenttrace.report.build import report_streamed

    path = tmp_path / "calls.jsonl"
    generate(path, 2_000, seed=2)
    segment = {s["spanId"]: next((a["value"]["stringValue"] for a in s["attributes"] if a["key"] == "agenttrace.segment"), None)
               for s in _spans(path)}
    calls = add_client_spans(path, 0.5)
    chats = add_chat_spans(path, 0.5)
    spans = _spans(path)
    by_id = {s["spanId"]: s for s in spans}
    added = [s for s in spans if s["spanId"] not in segment]
    assert len(added) == calls + chats > 100
    for s in added:
        parent = by_id[s["parentSpanId"]]
        assert segment[parent["spanId"]] in ("generation", "tool") and s["kind"] == 3
        assert int(parent["startTimeUnixNano"]) <= int(s["startTimeUnixNano"]) < int(s["endTimeUnixNano"]) <= int(parent["endTimeUnixNano"])
    assert {segment[s["parentSpanId"]] for s in added if s["name"].startswith("chat")} == {"generation"}
    outcome = report_files([path], threads=1)
    assert outcome.reason is None and outcome.per_trace_spans == 0
    assert outcome.report.model_dump_json() == report_streamed([str(path)]).model_dump_json()
