"""A full report's generations through the columnar engine: their figures made from the values the
queries state (generations_sql.py), their text read from their attributes by spec.py's own
text_figures, and the generations the values do not state given to spec.py whole: the same JSON
as the per-span path's, from a file and from a store."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from agenttrace.cli import main
from agenttrace.columnar.engine import report_files, report_store
from agenttrace.report.build import report_streamed
from agenttrace.traces.clickhouse import ClickHouseQuery

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def _arr(kind: str, values: list) -> dict:
    return {"arrayValue": {"values": [{kind: v} for v in values]}}


def _kv(key: str, value: dict) -> dict:
    return {"key": key, "value": value}


_ROOFLINE = [
    _kv("agenttrace.roofline.phase", _arr("stringValue", ["prefill", "decode"])),
    _kv("agenttrace.roofline.rows", _arr("intValue", ["40", "1"])),
    _kv("agenttrace.roofline.flops", _arr("doubleValue", [1.5e9, 2.25e8])),
    _kv("agenttrace.roofline.bytes", _arr("intValue", ["540000000", "6500000000"])),  # integers read as floats
    _kv("agenttrace.roofline.seconds", _arr("doubleValue", [0.03, 0.41])),
]
# One generation each, in turn: what the values state, and what goes to spec.py whole.
_VARIANTS = [
    # the roofline's phases and peaks from the columns; constraint and batch figures
    [*_ROOFLINE, _kv("agenttrace.roofline.passes", _arr("intValue", ["1", "12"])),
     _kv("agenttrace.roofline.peak.flop_s", {"intValue": "191000000000"}),
     _kv("agenttrace.roofline.peak.bytes_s", {"doubleValue": 3.53e10}),
     _kv("agenttrace.roofline.device", {"stringValue": "cpu"}),
     _kv("agenttrace.constrain.engine", {"stringValue": "xgrammar"}),
     _kv("agenttrace.constrain.mask_s", {"doubleValue": 0.0123}),
     _kv("agenttrace.constrain.compile_s", {"doubleValue": 0.5}),
     _kv("agenttrace.constrain.drafts_cut", {"intValue": "3"}),
     _kv("agenttrace.batch.size", {"doubleValue": 2.5})],
    # text figures: a fallback's reason, a constraint's fallback, and those whose type no reader
    # checks, not text here (read by spec.text_figures as the per-span code reads them)
    [_kv("agenttrace.spec.fallback", {"boolValue": True}),
     _kv("agenttrace.spec.fallback.reason", {"stringValue": "drafter failed"}),
     _kv("agenttrace.constrain.engine", {"stringValue": "llguidance"}),
     _kv("agenttrace.constrain.fallback", {"stringValue": "grammar too large"}),
     _kv("agenttrace.spec.policy", {"boolValue": False}),
     _kv("agenttrace.batch.size", {"boolValue": True}),
     _kv("agenttrace.roofline.peak.flop_s", {"doubleValue": 2e11}),
     _kv("agenttrace.roofline.peak.bytes_s", {"boolValue": True}),
     _kv("agenttrace.roofline.device", {"intValue": "4"})],
    # a roofline array holding a double where an integer goes: spec.py's, whole
    [*_ROOFLINE, _kv("agenttrace.roofline.passes", _arr("doubleValue", [1.0, 12.5]))],
    # untouched
    [],
]


def _trace(path: Path) -> Path:
    """The speculative and baseline samples, their generations given the variants in turn."""
    variants = itertools.cycle(_VARIANTS)
    out = []
    for name in ("demo-speculative.jsonl", "demo-baseline.jsonl"):
        for line in (SAMPLES / name).read_text().splitlines():
            doc = json.loads(line)
            for s in (s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]):
                if _kv("agenttrace.segment", {"stringValue": "generation"}) in s["attributes"]:
                    added = next(variants)
                    keys = {a["key"] for a in added}
                    s["attributes"] = [a for a in s["attributes"] if a["key"] not in keys] + added
            out.append(json.dumps(doc))
    path.write_text("\n".join(out) + "\n")
    return path


def test_generations_from_the_values_give_the_per_span_reports_json(tmp_path, capsys):
    trace = _trace(tmp_path / "gens.jsonl")
    ref = report_streamed([str(trace)])
    gens = [g for t in ref.tasks for s in t.steps for g in s.generations]
    # every variant is there: phases and peaks, non-text text figures, a constrained call
    assert not ref.problems and any(g.roofline and g.roofline_peaks for g in gens)
    assert any(g.fallback and g.fallback_reason == "drafter failed" and g.constrain_fallback for g in gens)
    assert any(g.spec_policy == "False" and g.batch_size == 1.0 and g.roofline_peaks[2] == "4" for g in gens)
    assert any(g.constrain_s and g.drafts_cut for g in gens) and any(g.rounds for g in gens) and ref.whatif
    outcome = report_files([trace])
    assert outcome.reason is None and outcome.per_span_tasks == 0
    assert outcome.report.model_dump_json() == ref.model_dump_json()

    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(trace), "--clickhouse", url]) == 0
    capsys.readouterr()
    stored = report_store(ClickHouseQuery(url, "otel_traces"))
    assert stored.reason is None
    assert main(["report", "--clickhouse", url, "--engine", "python", "--format", "json"]) == 0
    assert json.loads(stored.report.model_dump_json()) == json.loads(capsys.readouterr().out)


def test_records_made_a_few_tasks_at_a_time_give_the_same_report(tmp_path, monkeypatch):
    from agenttrace.columnar import records

    from agenttrace.bench.synthetic import generate

    synthetic = tmp_path / "synthetic.jsonl"  # parallel tool calls: critical paths, retries, rounds
    generate(synthetic, 3_000, seed=3)
    foreign = Path(__file__).resolve().parents[2] / "traces" / "frameworks" / "autogen-openinference.jsonl"
    both = [_trace(tmp_path / "gens.jsonl"), synthetic, foreign]  # a framework's traces among ours
    whole = report_files(both)
    monkeypatch.setattr(records, "CHUNK_TASKS", 7)
    chunked = report_files(both)
    ref = report_streamed([str(p) for p in both])
    assert len(ref.tasks) > 50 and any(t.critical_path for t in ref.tasks)
    assert chunked.reason is None and whole.reason is None
    assert chunked.report.model_dump_json() == whole.report.model_dump_json() == ref.model_dump_json()
    assert chunked.bytes_back > whole.bytes_back * 0.9


def _fine(src: Path, dst: Path) -> Path:
    """`src` as the runtime's fine detail records it: each speculate.round event of a generation
    becomes a draft and a verify child span (their times inside the generation)."""
    ids = itertools.count(1)
    out = []
    for line in src.read_text().splitlines():
        doc = json.loads(line)
        for ss in (ss for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]):
            kids = []
            for s in ss["spans"]:
                rounds = [e for e in s.get("events", []) if e["name"] == "speculate.round"]
                if not rounds:
                    continue
                s["events"] = [e for e in s["events"] if e["name"] != "speculate.round"]
                t, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
                slot = (end - t) // (2 * len(rounds))
                for e in rounds:
                    a = {x["key"]: x["value"] for x in e["attributes"]}
                    for name, seg, keys, took in (
                            ("speculate.draft", "draft", {"agenttrace.spec.drafted": a["drafted"]}, slot // 3),
                            ("speculate.verify", "verify", {"agenttrace.spec.accepted": a["accepted"]}, slot)):
                        attrs = [_kv("agenttrace.segment", {"stringValue": seg}), *(_kv(k, v) for k, v in keys.items())]
                        kids.append({"traceId": s["traceId"], "spanId": f"f{next(ids):015x}", "parentSpanId": s["spanId"],
                                     "name": name, "kind": 1, "startTimeUnixNano": str(t),
                                     "endTimeUnixNano": str(t + took), "attributes": attrs})
                        t += slot
            ss["spans"] += kids
        out.append(json.dumps(doc))
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_rounds_told_as_draft_and_verify_spans_are_read_by_the_queries(tmp_path):
    from agenttrace.bench.synthetic import generate

    generate(tmp_path / "synthetic.jsonl", 3_000, seed=3)
    trace = _fine(tmp_path / "synthetic.jsonl", tmp_path / "fine.jsonl")
    ref = report_streamed([str(trace)])
    assert ref.whatif and any(g.rounds for t in ref.tasks for s in t.steps for g in s.generations)
    assert "speculate.round" not in trace.read_text() and "speculate.verify" in trace.read_text()
    full = report_files([trace])
    assert full.reason is None and full.per_span_tasks == 0  # every task's figures from the queries
    assert full.report.model_dump_json() == ref.model_dump_json()
    summary = report_files([trace], sample=100)
    assert summary.report.tasks == [] and "made in the engine" in summary.report.problems[-1]
    keys = ("run", "by_label", "whatif", "roofline", "inputs")
    assert summary.report.model_dump(include=set(keys)) == ref.model_dump(include=set(keys))
