"""Inputs that mix our traces with other instrumentations' (columnar/per_trace.py): the foreign
traces are reported by the per-span code one trace at a time, the rest by the queries, and the
report is the per-span path's, byte for byte, from files and from a store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from agenttrace.cli import main
from agenttrace.columnar.engine import report_files, report_store
from agenttrace.report.build import report_clickhouse, report_streamed
from agenttrace.traces.clickhouse import ClickHouseQuery

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "traces" / "samples"
FRAMEWORKS = ROOT / "traces" / "frameworks"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """Our samples beside every framework's trace (OpenInference, OpenLLMetry, GenAI, ADK, ...)."""
    folder = tmp_path_factory.mktemp("mixed")
    for f in [*SAMPLES.glob("*.jsonl"), *FRAMEWORKS.glob("*.jsonl")]:
        shutil.copy(f, folder / f.name)
    return folder


def _structured_spans(folder: Path) -> int:
    """The spans of the traces in `folder` that hold a span the structure rules read (an agent, a
    model call, a tool execution of another instrumentation), by the per-span code's classify."""
    from agenttrace.traces.conventions import classify
    from agenttrace.traces.load import load_spans

    by_trace: dict[str, list] = {}
    for s in load_spans([str(folder)]).spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    members = {"agent", "generation", "tool"}
    return sum(len(spans) for spans in by_trace.values()
               if any(s.segment is None and (r := classify(s)) is not None and r.segment in members for s in spans))


def _inputs(report) -> dict[str, list[str]]:
    return {i.source: [c.name for c in i.conventions] for i in report.inputs}


def test_a_folder_of_ours_and_other_instrumentations_traces_gives_the_per_span_report(mixed):
    outcome = report_files([mixed], threads=2)
    assert outcome.reason is None
    ref = report_streamed([str(mixed)])
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    # the foreign traces went through the per-span code, ours through the queries, and so did the
    # foreign traces with no agent, model call or tool execution (ADK's `create_agent` spans alone:
    # their roles map them in the table, roles.py)
    assert outcome.per_trace_spans == _structured_spans(FRAMEWORKS) > 0
    assert any(i.inferred for i in ref.inputs) and any(i.left_out for i in ref.inputs)


def _figures(report) -> dict:
    """What a summary shows: the run figures, per label, the what-if, the roofline, the inputs."""
    doc = report.model_dump(mode="json")
    return {k: doc[k] for k in ("run", "by_label", "whatif", "roofline", "inputs", "problems")}


def test_a_summary_of_ours_and_other_instrumentations_traces_is_made_in_the_engine(mixed, tmp_path, monkeypatch):
    # the foreign traces go back into the table as our span tree (columnar/mapped.py) and the
    # aggregates make every figure (no task row comes back), the delegating tasks' stages and
    # sub-agent counts too: the per-span path's figures
    from agenttrace.columnar import batches, summary

    made = []
    monkeypatch.setattr(summary, "run_folds", lambda engine, p, f=summary.run_folds: made.append(1) or f(engine, p))
    full = report_streamed([str(mixed)])
    assert full.run.sub_agents and full.run.stages.delegation_overhead
    outcome = report_files([mixed], threads=2, summary_only=True)
    assert outcome.reason is None and outcome.per_trace_spans > 0 and outcome.report.tasks == []
    assert _figures(outcome.report) == _figures(full) and len(made) == 1
    sampled = report_files([mixed], threads=2, sample=100)
    assert "made in the engine" in sampled.report.problems[-1]
    assert {**_figures(sampled.report), "problems": []} == {**_figures(full), "problems": []}
    # our long-horizon demo (a compaction, sub-agents side by side) beside a framework's trace:
    # every figure from the aggregates too
    both = tmp_path / "both"
    both.mkdir()
    for f in (ROOT / "traces" / "long_horizon" / "demo-long_horizon.jsonl", FRAMEWORKS / "smolagents-openinference.jsonl"):
        shutil.copy(f, both / f.name)
    outcome = report_files([both], summary_only=True)
    assert outcome.reason is None and outcome.report.tasks == []
    assert _figures(outcome.report) == _figures(report_streamed([str(both)]))
    assert len(made) == 3
    # three batches of files: each batch's foreign traces go back into its table, the inputs' readings add up
    monkeypatch.setattr(batches, "BATCH_BYTES", sum(f.stat().st_size for f in mixed.glob("*.jsonl")) // 3)
    assert _figures(report_files([mixed], threads=2, summary_only=True).report) == _figures(full)
    assert len(made) == 4


@pytest.mark.parametrize("ours_first", [True, False])
def test_one_file_holding_both_lists_conventions_in_the_order_they_come(tmp_path, ours_first):
    # ADK's trace has conventions and left-out spans of three kinds: with our spans before or after
    # them in the file, the input's conventions and left-out lists keep the per-span path's order
    parts = [(SAMPLES / "demo-speculative.jsonl").read_text(),
             (FRAMEWORKS / "google-adk-openinference-legacy.jsonl").read_text()]
    path = tmp_path / "both.jsonl"
    path.write_text("".join(p if p.endswith("\n") else p + "\n" for p in (parts if ours_first else parts[::-1])))
    outcome = report_files([path], threads=1)
    ref = report_streamed([str(path)])
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    assert _inputs(ref)[str(path)][0] == ("agenttrace" if ours_first else "OpenInference")


def test_a_store_of_ours_and_other_instrumentations_traces_gives_the_per_span_report(mixed, tmp_path, capsys):
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(mixed), "--clickhouse", url]) == 0
    capsys.readouterr()
    query = ClickHouseQuery(url)
    outcome = report_store(query, threads=1)
    assert outcome.reason is None and outcome.per_trace_spans > 0
    assert outcome.report.model_dump_json() == report_clickhouse(query).model_dump_json()
    assert main(["report", "--clickhouse", url, "--format", "json", "--engine", "columnar"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and json.loads(out.out) == json.loads(report_clickhouse(query).model_dump_json())


@pytest.mark.parametrize("spans_per_batch", [None, 300])
def test_a_stores_summary_of_ours_and_other_instrumentations_traces_is_made_in_it(mixed, tmp_path, capsys,
                                                                                 monkeypatch, spans_per_batch):
    # their traces go back into the table, in the store's session, as our span tree; read in
    # batches of traces, each batch's do, and the store's reading adds up
    from agenttrace.columnar import batches

    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(mixed), "--clickhouse", url]) == 0
    capsys.readouterr()
    query = ClickHouseQuery(url)
    if spans_per_batch:
        monkeypatch.setattr(batches, "BATCH_SPANS", spans_per_batch)
        loads = []
        monkeypatch.setattr(batches, "_keep", lambda engine, n, f=batches._keep: loads.append(n) or f(engine, n))
    summary = report_store(query, threads=1, summary_only=True)
    assert summary.reason is None and summary.per_trace_spans > 0
    assert _figures(summary.report) == _figures(report_clickhouse(query))
    assert not spans_per_batch or len(loads) >= 3, loads

    def printed(*args: str) -> str:
        assert main(["report", "--clickhouse", url, *args, "--summary-only", "--format", "markdown"]) == 0
        return capsys.readouterr().out

    assert printed("--engine", "columnar") == printed("--engine", "python")


def test_every_trace_foreign_still_goes_to_the_per_span_path_whole(tmp_path):
    # nothing for the queries to do: one pass of the per-span reader costs less than two
    folder = tmp_path / "foreign"
    folder.mkdir()
    for f in list(FRAMEWORKS.glob("*openinference*.jsonl"))[:3]:
        shutil.copy(f, folder / f.name)
    outcome = report_files([folder], threads=1)
    assert outcome.report is None and "another instrumentation" in outcome.reason


def test_problems_in_a_foreign_trace_are_worded_with_their_source_line(tmp_path):
    # a span of a foreign trace naming a parent that is not in the input: the per-span code words
    # it, naming the file and line (read again from there), and the rest still comes from the queries
    lines = (FRAMEWORKS / "langgraph-create_agent-openinference.jsonl").read_text().splitlines()
    doc = json.loads(lines[0])
    span = next(s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"] if s.get("parentSpanId"))
    span["parentSpanId"] = "f" * 16
    path = tmp_path / "orphan.jsonl"
    path.write_text((SAMPLES / "demo-baseline.jsonl").read_text() + "\n".join([json.dumps(doc), *lines[1:]]) + "\n")
    outcome = report_files([path], threads=1)
    ref = report_streamed([str(path)])
    assert outcome.reason is None and any(f"{path}:" in p for p in ref.problems)
    assert outcome.report.model_dump_json() == ref.model_dump_json()


def test_what_a_convention_may_map_is_found_by_the_query_for_every_framework_span():
    # roles.recognisable is a superset of the conventions' own test (classify): a span it calls
    # unknown stays with the queries as "no known convention", so it must never be one they map
    from agenttrace.columnar.roles import recognisable
    from agenttrace.columnar.engine import Engine
    from agenttrace.columnar.load import file_insert, table
    from agenttrace.traces.conventions import classify
    from agenttrace.traces.load import load_spans

    files = sorted(FRAMEWORKS.glob("*.jsonl"))
    engine = Engine(threads=1)
    engine.q(table())
    for n, f in enumerate(files):
        engine.q(file_insert(f"'{f}'", n << 48))
    rows, _ = engine.table(f"SELECT trace_id, span_id, {recognisable()} AS maybe FROM spans WHERE segment = ''")
    maybe = {(t, s): bool(m) for t, s, m in zip(rows["trace_id"], rows["span_id"], rows["maybe"], strict=True)}
    spans = [s for s in load_spans(files).spans if s.segment is None]
    assert len(spans) == len(maybe) > 900
    recognised = [s for s in spans if classify(s) is not None]
    assert recognised and all(maybe[(s.trace_id, s.span_id)] for s in recognised)


def _with_spans_of_our_own(path: Path) -> Path:
    """The demo's trace with spans a user added around ours (no segment, no convention's marks)."""
    import random

    rng = random.Random(1)
    lines = []
    for line in (SAMPLES / "demo-speculative.jsonl").read_text().splitlines():
        doc = json.loads(line)
        for ss in (ss for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]):
            extra = []
            for s in ss["spans"]:
                if rng.random() < 0.4:
                    start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
                    extra.append({"traceId": s["traceId"], "spanId": f"{rng.getrandbits(64):016x}", "parentSpanId": s["spanId"],
                                  "name": rng.choice(["load_config", "db lookup", "cache.get"]), "kind": 1,
                                  "startTimeUnixNano": str(start + (end - start) // 4),
                                  "endTimeUnixNano": str(start + (end - start) // 2), "attributes": []})
            ss["spans"] += extra
        lines.append(json.dumps(doc))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_spans_of_no_known_convention_stay_with_the_queries_summary_and_all(tmp_path):
    path = _with_spans_of_our_own(tmp_path / "own.jsonl")
    outcome = report_files([path], threads=1)
    ref = report_streamed([str(path)])
    left = ref.inputs[0].left_out
    assert left and left[0].convention is None and left[0].spans > 5
    assert outcome.reason is None and outcome.per_trace_spans == 0
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    # and the summary is made in the engine, its inputs listing them too
    summary = report_files([path], threads=1, sample=100).report
    assert "made in the engine" in summary.problems[-1] and summary.inputs == ref.inputs
    assert summary.run == ref.run
