"""The columnar engine (agenttrace/columnar) gives the per-span path's report, byte for byte, on
what it covers, and hands the rest to the per-span path with a line saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from agenttrace.bench.synthetic import generate
from agenttrace.cli import main
from agenttrace.columnar.engine import ColumnarError, report_files
from agenttrace.report.build import report_streamed

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "traces" / "samples"
FRAMEWORKS = ROOT / "traces" / "frameworks"


def _json(report) -> str:
    return report.model_dump_json()


def _spans(doc: dict) -> list[dict]:
    """The spans of one OTLP/JSON request, in place."""
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _cli(capsys, *args: str) -> tuple[str, str]:
    assert main(["report", *args, "--format", "json"]) == 0
    out = capsys.readouterr()
    return out.out, out.err


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """The benchmark's traces (two labels, retries, parallel tool calls, round events)."""
    path = tmp_path_factory.mktemp("columnar") / "synthetic.jsonl"
    generate(path, 20_000, seed=3)
    return path


def test_the_samples_give_the_same_json_byte_for_byte(capsys):
    ours, err = _cli(capsys, str(SAMPLES), "--engine", "columnar")
    theirs, _ = _cli(capsys, str(SAMPLES), "--engine", "python")
    assert err == ""
    assert ours == theirs


def test_synthetic_traces_with_parallel_children_give_the_same_report(synthetic):
    outcome = report_files([synthetic], threads=2)
    assert outcome.reason is None
    ref = report_streamed([str(synthetic)])
    assert any(t.critical_path for t in ref.tasks)  # the chain and Jaeger's walk both ran
    assert any(t.retry_s for t in ref.tasks) and ref.whatif
    assert _json(outcome.report) == _json(ref)
    # only rows came back, never spans: a small share of the file
    assert outcome.bytes_back < 0.5 * synthetic.stat().st_size


def _figures(report) -> dict:
    """What a summary and a report share: the run figures, per label, the what-if, the roofline."""
    doc = report.model_dump(mode="json")
    return {k: doc[k] for k in ("run", "by_label", "whatif", "roofline", "inputs")}


def test_a_summary_is_made_in_the_engine_with_the_reports_own_figures(synthetic):
    # every run figure, per label, the what-if: bit for bit the full report's (sums in the fold's
    # order, percentiles from the same order statistics), from a few kilobytes of aggregates
    outcome = report_files([synthetic], threads=2, sample=100)
    full = report_streamed([str(synthetic)])
    assert len(full.by_label) == 2 and full.whatif and full.run.step_segments.tool.count
    assert outcome.report.tasks == [] and _figures(outcome.report) == _figures(full)
    assert outcome.bytes_back < 0.001 * synthetic.stat().st_size
    assert outcome.report.problems[-1].startswith(f"summary of {full.run.tasks} task(s), made in the engine")
    # the per-span summary samples its distributions (here 100 values of each): counts, sums
    # and extremes agree, percentiles need not
    sampled = report_streamed([str(synthetic)], sample=100).run
    assert (sampled.tasks, sampled.ttvtc.count, sampled.ttvtc.max) == (
        outcome.report.run.tasks, outcome.report.run.ttvtc.count, outcome.report.run.ttvtc.max)
    assert sampled.ttvtc.sample == 100 and outcome.report.run.ttvtc.sample is None


def test_a_summary_of_a_roofline_trace_and_of_the_samples_in_the_engine(tmp_path):
    trace = _with_roofline(tmp_path / "roofline.jsonl", speculation=False)
    both = [trace, SAMPLES / "demo-speculative.jsonl"]
    outcome = report_files(both, sample=100)
    assert outcome.report.tasks == [] and "made in the engine" in outcome.report.problems[-1]
    full = report_streamed([str(p) for p in both])
    assert full.roofline and full.whatif and _figures(outcome.report) == _figures(full)


def test_auto_makes_a_summary_of_files_in_the_engine_where_it_fits(capsys, monkeypatch):
    from agenttrace.commands import report as command

    monkeypatch.setattr(command, "SUMMARY_MIN_BYTES", 0)  # the samples are small: as if they were not
    summary = json.loads(_cli(capsys, str(SAMPLES), "--sample", "100")[0])
    assert "made in the engine" in summary["problems"][-1]
    monkeypatch.setattr(command, "_available_bytes", lambda: 2 * command.SUMMARY_PEAK_PER_BYTE * 1000)  # no room
    assert "uniform sample" in json.loads(_cli(capsys, str(SAMPLES), "--sample", "100")[0])["problems"][-1]
    monkeypatch.undo()
    assert "uniform sample" in json.loads(_cli(capsys, str(SAMPLES), "--sample", "100")[0])["problems"][-1]


def test_summary_only_is_made_in_the_engine_and_prints_the_full_reports_summary(store, capsys, monkeypatch):
    # --summary-only shows no task row: the engine's summary (the full report's figures) serves it,
    # and the page is the per-span path's, line for line
    from agenttrace.columnar import summary

    made = []
    monkeypatch.setattr(summary, "run_folds", lambda engine, p, f=summary.run_folds: made.append(1) or f(engine, p))

    def printed(*args: str) -> str:
        assert main(["report", *args, "--summary-only", "--format", "markdown"]) == 0
        return capsys.readouterr().out

    assert printed(str(SAMPLES), "--engine", "columnar") == printed(str(SAMPLES), "--engine", "python")
    assert printed("--clickhouse", store) == printed("--clickhouse", store, "--engine", "python")  # auto: in the store
    assert len(made) == 2


def test_a_summary_of_many_files_is_made_a_batch_at_a_time(tmp_path, monkeypatch):
    # one batch's spans in the engine at a time, the values kept: the one table's figures
    from agenttrace.columnar import batches

    folder = tmp_path / "folder"
    generate(folder, 2_400, seed=4, file_spans=800)
    monkeypatch.setattr(batches, "BATCH_BYTES", 1)  # a file a batch
    dropped = []
    monkeypatch.setattr(batches, "_drop", lambda engine, f=batches._drop: dropped.append(1) or f(engine))
    outcome = report_files([folder], sample=100)
    assert len(dropped) == 4  # before each of the three batches, and after the last
    assert outcome.report.tasks == [] and "made in the engine" in outcome.report.problems[-1]
    assert _figures(outcome.report) == _figures(report_streamed([str(folder)]))
    # a trace whose spans lie in two batches: the per-span path, with the reason
    lines = (SAMPLES / "demo-speculative.jsonl").read_text().splitlines()
    split = tmp_path / "split"
    split.mkdir()
    # (the later lines first: a batch of steps without their agent span would be partial tasks)
    (split / "a.jsonl").write_text("\n".join(lines[len(lines) // 2:]) + "\n")
    (split / "b.jsonl").write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    outcome = report_files([split], sample=100)
    assert outcome.report is None and "two batches" in outcome.reason


def test_a_task_with_no_step_and_parallel_tools_keeps_its_overlap_in_the_summary(tmp_path):
    # a task whose only spans are two tools running side by side (no step span): its overlap is
    # overlap, not retry time (the task's arrays of a table it has no row in come back empty)
    doc = json.loads((SAMPLES / "demo-baseline.jsonl").read_text().splitlines()[0])
    spans = _spans(doc)
    agent = {**next(s for s in spans if not s.get("parentSpanId")), "traceId": "ab" * 16}  # a trace of its own
    start = int(agent["startTimeUnixNano"])

    def tool(n: int) -> dict:
        return {**agent, "spanId": f"{n:016x}", "parentSpanId": agent["spanId"], "name": f"tool {n}", "events": [],
                "startTimeUnixNano": str(start + n * 1_000), "endTimeUnixNano": str(start + 5_000_000 + n * 1_000),
                "attributes": [{"key": "agenttrace.segment", "value": {"stringValue": "tool"}}]}

    rs = doc["resourceSpans"][0]
    rs["scopeSpans"] = [{**rs["scopeSpans"][0], "spans": [agent, tool(1), tool(2)]}]
    path = tmp_path / "no-step.jsonl"
    path.write_text(json.dumps({"resourceSpans": [rs]}) + "\n" + (SAMPLES / "demo-baseline.jsonl").read_text())
    full = report_streamed([str(path)])
    assert full.run.overlap_segments.tool > 0 and not full.run.retry_segments.tool
    outcome = report_files([path], threads=1, sample=100)
    assert "made in the engine" in outcome.report.problems[-1] and _figures(outcome.report) == _figures(full)


def test_a_summary_the_aggregates_do_not_cover_is_made_from_the_rows(tmp_path):
    # speculation told by totals alone (no round events): the what-if reads acceptance by
    # position per generation, so the summary is folded from the rows, as the per-span path does
    trace = _with_roofline(tmp_path / "roofline.jsonl")
    outcome = report_files([trace], sample=100)
    assert _json(outcome.report) == _json(report_streamed([str(trace)], sample=100))


def test_input_order_is_the_files_whatever_thread_parsed_a_line(tmp_path):
    # ties are broken by input order, as the per-span path does: on a file of many blocks (8 lines
    # each) and lines of several resources and scopes, the table's order is the file's, every run
    from agenttrace.columnar import load
    from agenttrace.columnar.engine import Engine

    spans = [s for line in (SAMPLES / "demo-speculative.jsonl").read_text().splitlines() for s in _spans(json.loads(line))]
    lines = []
    for n in range(40):  # each line: two resources of two scopes, spans spread over them
        chunk = spans[(n * 7) % len(spans):][:8]
        lines.append(json.dumps({"resourceSpans": [
            {"resource": {"attributes": []}, "scopeSpans": [{"spans": chunk[0:1]}, {"spans": chunk[1:4]}]},
            {"resource": {"attributes": []}, "scopeSpans": [{"spans": chunk[4:6]}, {"spans": chunk[6:8]}]}]}))
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    want = [s["spanId"].lower() for line in lines for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"] for s in ss["spans"]]
    for _ in range(3):
        engine = Engine(threads=2)
        engine.q(load.table())
        engine.q(load.file_insert(f"'{path}'", 0))
        assert engine.table("SELECT span_id FROM spans ORDER BY i")[0]["span_id"] == want


def test_another_instrumentations_trace_goes_to_the_per_span_path_and_says_so(capsys):
    trace = FRAMEWORKS / "langgraph-create_agent-openinference.jsonl"
    outcome = report_files([trace], threads=1)
    assert outcome.report is None and "another instrumentation" in outcome.reason
    ours, err = _cli(capsys, str(trace), "--engine", "columnar")
    assert "does not cover" in err and "per-span path reports it" in err
    assert json.loads(ours) == json.loads(_cli(capsys, str(trace), "--engine", "python")[0])


def test_a_malformed_line_goes_to_the_per_span_path_with_its_problem(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text((SAMPLES / "demo-baseline.jsonl").read_text() + '{"resourceSpans": [{"scopeSpans": [\n')
    with pytest.raises(ColumnarError):
        report_files([bad], threads=1)
    ours, err = _cli(capsys, str(bad), "--engine", "columnar")
    assert "could not read the input" in err
    theirs, _ = _cli(capsys, str(bad), "--engine", "python")
    assert ours == theirs and json.loads(ours)["problems"]


def test_a_step_overflowing_its_agent_span_goes_to_the_per_span_path(tmp_path, capsys):
    # the per-span path words a problem naming the span's source line, which the table does not keep
    doc = json.loads((SAMPLES / "demo-baseline.jsonl").read_text().splitlines()[0])
    spans = _spans(doc)

    def segment(s):
        return next((a["value"].get("stringValue") for a in s["attributes"] if a["key"] == "agenttrace.segment"), None)

    agent = next(s for s in spans if segment(s) == "agent")
    step = next(s for s in spans if s.get("parentSpanId") == agent["spanId"] and segment(s) == "step")
    step["endTimeUnixNano"] = str(int(agent["endTimeUnixNano"]) + 5_000_000)
    path = tmp_path / "overflow.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    assert report_files([path], threads=1).reason == "steps outside their agent span"
    ours, err = _cli(capsys, str(path), "--engine", "columnar")
    assert "steps outside their agent span" in err and ours == _cli(capsys, str(path))[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A chdb folder with the exporter's table, holding the samples and some synthetic traces."""
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_export import export_spans
    from agenttrace.traces.otlp_file import iter_spans

    folder = tmp_path_factory.mktemp("columnar-store")
    url = f"chdb:{folder / 'ch'}"
    part = folder / "synthetic.jsonl"
    generate(part, 4_000, seed=5)
    problems: list[str] = []
    export_spans(connect(url), "otel_traces", (s for line in iter_spans([SAMPLES, part], problems) for s in line))
    assert problems == []
    return url


def test_a_store_computes_the_report_where_the_spans_are_with_its_filters(store, capsys):
    from agenttrace.columnar.engine import report_store
    from agenttrace.report.build import report_clickhouse
    from agenttrace.traces.clickhouse import ClickHouseQuery, connect

    starts = sorted(r[0] for r in connect(store).rows(
        "SELECT toUnixTimestamp64Nano(min(Timestamp)) FROM otel_traces GROUP BY TraceId"))
    for query in (ClickHouseQuery(store), ClickHouseQuery(store, since_ns=starts[5]),
                  ClickHouseQuery(store, until_ns=starts[3]), ClickHouseQuery(store, service="bench-agent"), ClickHouseQuery(store, service="nope")):
        outcome = report_store(query, threads=1)
        assert outcome.reason is None, outcome.reason
        ref = report_clickhouse(query)
        assert bool(ref.tasks) == (query.service != "nope")
        assert _json(outcome.report) == _json(ref)
        assert outcome.bytes_back <= sum(len(t.model_dump_json()) for t in ref.tasks)  # figures, not spans
    ours, err = _cli(capsys, "--clickhouse", store, "--engine", "columnar", "--sample", "100")
    summary, full = json.loads(ours), report_clickhouse(ClickHouseQuery(store)).model_dump(mode="json")
    assert err == "" and "made in the engine" in summary["problems"][-1] and summary["tasks"] == []
    assert {k: summary[k] for k in ("run", "by_label", "whatif")} == {k: full[k] for k in ("run", "by_label", "whatif")}
    # the session's tables were temporary: nothing was left in the store's database
    assert [r[0] for r in connect(store).rows("SHOW TABLES")] == ["otel_traces"]


def test_a_store_of_another_instrumentations_spans_goes_to_the_per_span_path(tmp_path, capsys):
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(FRAMEWORKS / "langgraph-create_agent-openinference.jsonl"), "--clickhouse", url]) == 0
    capsys.readouterr()
    ours, err = _cli(capsys, "--clickhouse", url, "--engine", "columnar")
    assert "does not cover" in err and "another instrumentation" in err
    assert ours == _cli(capsys, "--clickhouse", url, "--engine", "python")[0]


def test_auto_computes_a_stores_figures_in_it_and_falls_back_quietly(store, synthetic, tmp_path, capsys, monkeypatch):
    """`--engine auto` (the default): a store's figures computed in it, unless a page or byte budget
    bounds a per-span read; where the engine does not cover the store's spans, the per-span path's
    report without a word on stderr; files on the per-span path."""
    from agenttrace.columnar import engine

    used = []
    for name in ("report_store", "report_files"):
        real = getattr(engine, name)
        monkeypatch.setattr(engine, name, lambda *a, real=real, name=name, **k: used.append(name) or real(*a, **k))
    ours, err = _cli(capsys, "--clickhouse", store)
    assert used == ["report_store"] and err == ""
    assert ours == _cli(capsys, "--clickhouse", store, "--engine", "python")[0]
    used.clear()
    _cli(capsys, "--clickhouse", store, "--max-requests", "100")  # a budget of pages: the per-span read
    _cli(capsys, str(synthetic))
    assert used == []
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(FRAMEWORKS / "langgraph-create_agent-openinference.jsonl"), "--clickhouse", url]) == 0
    capsys.readouterr()
    ours, err = _cli(capsys, "--clickhouse", url)
    assert used == ["report_store"] and err == ""  # tried, not covered, said nothing
    assert ours == _cli(capsys, "--clickhouse", url, "--engine", "python")[0]


def _with_roofline(path: Path, *, speculation: bool = True) -> Path:
    """The baseline sample with the roofline's arrays on its generations, as the demo records them
    (and, with `speculation`, speculation told by totals and acceptance by position)."""

    def arr(kind: str, values: list) -> dict:
        return {"arrayValue": {"values": [{kind: v} for v in values]}}

    out = []
    for line in (SAMPLES / "demo-baseline.jsonl").read_text().splitlines():
        doc = json.loads(line)
        for s in _spans(doc):
            if {"key": "agenttrace.segment", "value": {"stringValue": "generation"}} in s["attributes"]:
                s["attributes"] += [
                    {"key": "agenttrace.roofline.phase", "value": arr("stringValue", ["prefill", "decode"])},
                    {"key": "agenttrace.roofline.passes", "value": arr("intValue", ["1", "12"])},
                    {"key": "agenttrace.roofline.rows", "value": arr("intValue", ["40", "1"])},
                    {"key": "agenttrace.roofline.flops", "value": arr("doubleValue", [1.5e9, 2.25e8])},
                    {"key": "agenttrace.roofline.bytes", "value": arr("doubleValue", [5.4e8, 6.5e9])},
                    {"key": "agenttrace.roofline.seconds", "value": arr("doubleValue", [0.03, 0.41])},
                    {"key": "agenttrace.roofline.peak.flop_s", "value": {"doubleValue": 1.91e11}},
                    {"key": "agenttrace.roofline.peak.bytes_s", "value": {"doubleValue": 3.53e10}},
                    {"key": "agenttrace.roofline.device", "value": {"stringValue": "cpu"}},
                ]
                if not speculation:
                    continue
                s["attributes"] += [  # speculation told by totals and acceptance by position (no round events)
                    {"key": "agenttrace.spec.method", "value": {"stringValue": "prompt_lookup"}},
                    {"key": "agenttrace.spec.rounds", "value": {"intValue": "4"}},
                    {"key": "agenttrace.spec.draft_tokens", "value": {"intValue": "8"}},
                    {"key": "agenttrace.spec.accepted_tokens", "value": {"intValue": "5"}},
                    {"key": "agenttrace.spec.num_speculative_tokens", "value": {"intValue": "2"}},
                    {"key": "agenttrace.spec.acceptance_per_position", "value": arr("doubleValue", [3.0, 2.0])},
                ]
        out.append(json.dumps(doc))
    path.write_text("\n".join(out) + "\n")
    return path


def test_roofline_and_acceptance_by_position_come_through_files_and_stores(tmp_path, capsys):
    trace = _with_roofline(tmp_path / "roofline.jsonl")
    ours, err = _cli(capsys, str(trace), "--engine", "columnar")
    assert err == "" and json.loads(ours)["roofline"]  # the arrays were read, not left out
    (row,) = json.loads(ours)["whatif"]
    assert row["alpha_estimator"] == "positions" and row["alpha"] == pytest.approx(8 * 5 / (8 * 5 + 8 * 2))
    assert ours == _cli(capsys, str(trace))[0]
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(trace), "--clickhouse", url]) == 0
    capsys.readouterr()
    ours, err = _cli(capsys, "--clickhouse", url, "--engine", "columnar")
    assert err == "" and ours == _cli(capsys, "--clickhouse", url)[0]


def test_tasks_with_sub_agents_and_compactions_get_the_per_span_paths_figures(tmp_path, capsys):
    # `agenttrace demo --suite long_horizon --tasks 3`: a delegation (two sub-agents side by side,
    # read in the per-span walk's order: tree.dfs_key) and a compaction; their figures come from
    # the queries (runs_sql.py), as the other task's and the samples', in one report
    trace = ROOT / "traces" / "long_horizon" / "demo-long_horizon.jsonl"
    outcome = report_files([trace, SAMPLES], threads=1)
    assert outcome.reason is None and outcome.per_span_tasks == 0
    ref = report_streamed([str(trace), str(SAMPLES)])
    assert any(t.sub_agents for t in ref.tasks) and any(t.compactions for t in ref.tasks)
    assert _json(outcome.report) == _json(ref)
    ours, err = _cli(capsys, str(trace), "--engine", "columnar")
    assert err == "" and ours == _cli(capsys, str(trace))[0]
    url = f"chdb:{tmp_path / 'ch'}"  # and inside a store
    assert main(["export", str(trace), "--clickhouse", url]) == 0
    capsys.readouterr()
    ours, err = _cli(capsys, "--clickhouse", url, "--engine", "columnar")
    assert err == "" and ours == _cli(capsys, "--clickhouse", url)[0]


def test_the_damaged_corpus_reports_the_same_through_the_columnar_engine(tmp_path, capsys):
    """A slice of the 741-file corpus of damaged traces (tests/fuzz_traces.py), and the kinds that
    once read differently: what the engine cannot read the same way goes to the per-span path, so
    every output and exit code is the per-span path's. (All 741 files: 0 differences, see the
    issue 32 note; the whole corpus takes minutes, one engine session per file.)"""
    from tests.fuzz_traces import build_corpus

    corpus = build_corpus(tmp_path, seed=19)
    once = ("deep event attribute", "parent cycle", "string value a dict", "attribute key a number",
            "number startTimeUnixNano=0", "blank lines", "empty request", "surrogate", "nul bytes", "latin-1",
            "jaeger string startTime=Infinity", "shared id")
    cases = [c for i, c in enumerate(corpus) if i % 80 == 0 or any(c.kind.startswith(k) for k in once)]
    assert len(cases) >= 25
    for case in cases:
        outs = []
        for engine in ("columnar", "python"):
            code = main(["report", str(case.path), "--format", "json", "--engine", engine])
            out = capsys.readouterr()
            lines = [x for x in out.err.splitlines() if "columnar engine" not in x]
            outs.append((code, out.out, lines))
        assert outs[0] == outs[1], case.kind
