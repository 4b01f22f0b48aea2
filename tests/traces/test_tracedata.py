"""Trace files round-trip: what the exporter writes, the reader gives back."""

from __future__ import annotations

from shared_fixtures import shared_fixture

from agenttrace import Agent, FakeClock
from agenttrace.testing import ScriptedModel, ScriptedReply, capture_telemetry
from agenttrace.traces.load import load_spans
from agenttrace.examples.tools import default_tools


def test_trace_file_round_trips(tmp_path):
    clock = FakeClock()
    path = tmp_path / "rt.jsonl"
    tel, memory = capture_telemetry(clock, trace_file=str(path), run_label="speculative")
    replies = [
        "oops",
        ScriptedReply('{"tool": "weather", "arguments": {"city": "Paris"}}', rounds=((3, 2, 0.001, 0.01),)),
        '{"answer": "rain"}',
    ]
    Agent(ScriptedModel(replies, clock, method="prompt_lookup", num_speculative_tokens=3), default_tools(), telemetry=tel).run("Paris?")
    tel.shutdown()
    written = {f"{s.context.span_id:016x}": s for s in memory.get_finished_spans()}
    loaded = load_spans([path])
    assert loaded.problems == []
    read = {s.span_id: s for s in loaded.spans}
    assert read.keys() == written.keys()
    for span_id, w in written.items():
        r = read[span_id]
        assert r.trace_id == f"{w.context.trace_id:032x}"
        assert r.parent_id == (f"{w.parent.span_id:016x}" if w.parent else None)
        assert (r.name, r.start_ns, r.end_ns) == (w.name, w.start_time, w.end_time)
        assert r.kind == w.kind.name
        assert r.attributes == {k: list(v) if isinstance(v, tuple) else v for k, v in w.attributes.items()}
        assert r.status == w.status.status_code.name and r.status_message == (w.status.description or "")
        assert [(e.name, e.time_ns, e.attributes) for e in r.events] == [
            (e.name, e.timestamp, dict(e.attributes)) for e in w.events
        ]
        assert r.resource["agenttrace.run.label"] == "speculative"


def test_reads_otlp_from_other_tools_with_upper_case_ids_and_numeric_times():
    loaded = load_spans([shared_fixture("otlp-trace-example.json")])
    assert loaded.problems == []
    assert loaded.spans, "the OTLP example holds spans"
    for s in loaded.spans:
        assert s.trace_id == s.trace_id.lower() and len(s.trace_id) == 32
        assert s.end_ns >= s.start_ns > 0


def test_a_missing_file_is_a_problem_not_a_crash(tmp_path):
    loaded = load_spans([tmp_path / "nope.jsonl"])
    assert loaded.spans == [] and loaded.problems == [f"{tmp_path / 'nope.jsonl'}: no such file"]
