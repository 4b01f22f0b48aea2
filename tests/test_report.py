"""Report figures on hand-built traces with known timings (SPANS.md definitions)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agenttrace.cli import main
from agenttrace.report import report_from_files
from trace_builder import S, write_trace


def gen(start, end, prefill_end, draft_s=None, verify_s=None, tokens=20):
    attrs = {"gen_ai.usage.output_tokens": tokens, "agenttrace.spec.method": "none"}
    if draft_s is not None:
        attrs |= {"agenttrace.spec.method": "prompt_lookup", "agenttrace.spec.draft_s": draft_s,
                  "agenttrace.spec.verify_s": verify_s, "agenttrace.spec.rounds": 4,
                  "agenttrace.spec.draft_tokens": 12, "agenttrace.spec.accepted_tokens": 6}
    return S("chat m", "generation", start, end, attrs, [S("prefill", "prefill", start, prefill_end)])


def known_task() -> S:
    attempt1 = S("attempt 1", "attempt", 0.0, 2.5, {"agenttrace.attempt.index": 1, "agenttrace.attempt.outcome": "validation_error"}, [
        gen(0.0, 2.0, 0.5, draft_s=0.1, verify_s=0.6),
        S("parse_tool_call", "parse", 2.0, 2.1, {"agenttrace.parse.ok": True, "agenttrace.parse.result": "tool_call"}),
        S("validate_arguments weather", "validation", 2.1, 2.5, {"agenttrace.validation.ok": False}),
    ], error="validation_error")
    attempt2 = S("attempt 2", "attempt", 2.5, 6.0, {"agenttrace.attempt.index": 2, "agenttrace.attempt.outcome": "ok"}, [
        gen(2.5, 4.5, 3.0, draft_s=0.2, verify_s=0.8),
        S("parse_tool_call", "parse", 4.5, 4.6, {"agenttrace.parse.ok": True, "agenttrace.parse.result": "tool_call"}),
        S("validate_arguments weather", "validation", 4.6, 4.8, {"agenttrace.validation.ok": True, "agenttrace.decision.correct": True}),
        S("execute_tool weather", "tool", 4.8, 5.8, {}, [S("GET", "network", 5.0, 5.5)]),
    ])
    step1 = S("agent_step 1", "step", 0.0, 6.0, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "tool_call",
                                                 "agenttrace.step.attempts": 2}, [attempt1, attempt2])
    step2 = S("agent_step 2", "step", 6.0, 9.5, {"agenttrace.step.index": 2, "agenttrace.step.outcome": "final_answer",
                                                 "agenttrace.step.attempts": 1}, [
        S("attempt 1", "attempt", 6.0, 9.5, {"agenttrace.attempt.outcome": "ok"}, [
            gen(6.0, 9.0, 7.0),
            S("parse_tool_call", "parse", 9.0, 9.2, {"agenttrace.parse.ok": True, "agenttrace.parse.result": "final_answer"}),
        ]),
    ])
    return S("invoke_agent a", "agent", 0.0, 10.0, {"agenttrace.task.id": "known", "agenttrace.task.outcome": "completed",
                                                   "gen_ai.agent.name": "a", "agenttrace.decisions.invalid": 1}, [step1, step2])


def test_known_timings_give_exact_figures(tmp_path):
    path = tmp_path / "known.jsonl"
    write_trace(path, known_task(), resource={"service.name": "t", "agenttrace.run.label": "speculative"})
    report = report_from_files([str(path)])
    assert report.problems == []
    (task,) = report.tasks
    s1, s2 = task.steps
    approx = lambda x: pytest.approx(x, abs=1e-9)  # noqa: E731

    assert s1.segments.model_dump() == {
        "prefill": approx(1.0), "draft": approx(0.3), "verify": approx(1.4), "generation": approx(1.3),
        "parse": approx(0.2), "validation": approx(0.6), "tool": approx(0.5), "network": approx(0.5),
        "memory": 0.0, "compaction": 0.0, "delegation": 0.0, "other": approx(0.2),
    }
    assert s1.segments.total() == approx(s1.wall_s) == approx(6.0)
    assert s1.ttvtc_s == approx(4.8)
    assert s1.retry_s == approx(2.5)
    assert s1.retry_segments.model_dump() == {
        "prefill": approx(0.5), "draft": approx(0.1), "verify": approx(0.6), "generation": approx(0.8),
        "parse": approx(0.1), "validation": approx(0.4), "tool": 0.0, "network": 0.0, "memory": 0.0,
        "compaction": 0.0, "delegation": 0.0, "other": approx(0.0),
    }
    assert (s1.outcome, s1.attempts, s1.start_s) == ("tool_call", 2, 0.0)

    assert s2.segments.prefill == approx(1.0) and s2.segments.generation == approx(2.0)
    assert s2.segments.parse == approx(0.2) and s2.segments.other == approx(0.3)
    assert s2.segments.total() == approx(s2.wall_s) == approx(3.5)
    assert s2.ttvtc_s == approx(3.2)  # a final answer's moment is the end of its parse
    assert s2.retry_s == 0.0

    assert task.ttvtc_s == approx(4.8) and task.time_to_correct_action_s == approx(4.8)
    assert (task.decisions_valid, task.decisions_invalid) == (2, 1)
    assert task.decision_throughput == approx(0.2)
    assert (task.attempts, task.valid_attempts) == (3, 2)
    assert task.segments.total() == approx(10.0) and task.segments.other == approx(0.2 + 0.3 + 0.5)
    assert task.retry_s == approx(2.5)
    assert task.run_label == "speculative"
    spec = task.speculation
    assert (spec.generations, spec.output_tokens, spec.rounds, spec.draft_tokens, spec.accepted_tokens) == (3, 60, 8, 24, 12)
    assert spec.acceptance_rate == approx(0.5) and spec.mean_acceptance_length == approx(2.5)
    assert spec.tokens_per_s == approx(60 / 7.0)

    run = report.run
    assert (run.tasks, run.completed, run.completion_rate) == (1, 1, 1.0)
    assert run.validity_rate == approx(2 / 3) and run.retry_share == approx(0.5)
    assert run.ttvtc.count == 1 and run.ttvtc.p50 == approx(4.8) and run.ttvtc.p99 is None


def test_fine_detail_spans_are_not_carved_twice(tmp_path):
    g = S("chat m", "generation", 0.0, 2.0, {"agenttrace.spec.draft_s": 0.3, "agenttrace.spec.verify_s": 0.9}, [
        S("prefill", "prefill", 0.0, 0.5),
        S("speculate.draft", "draft", 0.5, 0.8),
        S("speculate.verify", "verify", 0.8, 1.7),
    ])
    root = S("invoke_agent a", "agent", 0, 2, {}, [S("agent_step 1", "step", 0, 2, {}, [S("attempt 1", "attempt", 0, 2, {}, [g])])])
    write_trace(tmp_path / "f.jsonl", root)
    (step,) = report_from_files([str(tmp_path / "f.jsonl")]).tasks[0].steps
    assert step.segments.draft == pytest.approx(0.3) and step.segments.verify == pytest.approx(0.9)
    assert step.segments.generation == pytest.approx(0.3) and step.segments.total() == pytest.approx(2.0)


def test_parallel_children_follow_the_critical_path_and_show_overlap(tmp_path):
    attempt = S("attempt 1", "attempt", 0, 3, {}, [
        S("execute_tool a", "tool", 0, 2),
        S("execute_tool b", "tool", 1, 3),
    ])
    root = S("invoke_agent a", "agent", 0, 3, {}, [S("agent_step 1", "step", 0, 3, {}, [attempt])])
    write_trace(tmp_path / "p.jsonl", root)
    (step,) = report_from_files([str(tmp_path / "p.jsonl")]).tasks[0].steps
    assert step.segments.tool == pytest.approx(2.0) and step.segments.other == pytest.approx(1.0)
    assert step.segments.total() == pytest.approx(3.0)
    assert step.overlap_s == pytest.approx(2.0)


def test_broken_lines_are_reported_with_file_and_line_and_the_rest_is_analysed(tmp_path):
    path = tmp_path / "broken.jsonl"
    write_trace(path, known_task())
    good = path.read_text()
    path.write_text("{not json\n" + good + good[: len(good) // 2] + "\n[1, 2]\n")
    report = report_from_files([str(path)])
    assert len(report.tasks) == 1
    assert [p.split(": ", 1)[0] for p in report.problems] == [f"{path}:1", f"{path}:3", f"{path}:4"]
    assert "not valid JSON" in report.problems[0]


def test_cli_report_json_and_terminal(tmp_path, capsys):
    path = tmp_path / "known.jsonl"
    write_trace(path, known_task())
    assert main(["report", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1 and data["tasks"][0]["ttvtc_s"] == pytest.approx(4.8)
    assert data["run"]["speculation"]["acceptance_rate"] == pytest.approx(0.5)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "task known" in out and "run summary" in out and "4800" in out
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2


def test_the_report_path_never_imports_torch(tmp_path):
    path = tmp_path / "known.jsonl"
    write_trace(path, known_task())
    code = (
        "import sys; from agenttrace.cli import main; main(['report', sys.argv[1], '--format', 'json']); "
        "import agenttrace.telemetry, agenttrace.tracedata; "
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "print('HEAVY', bad, file=sys.stderr); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_committed_samples_report_without_the_model():
    from pathlib import Path

    samples = Path(__file__).resolve().parents[1] / "traces" / "samples"
    report = report_from_files([str(samples)])
    assert report.problems == []
    labels = {t.run_label for t in report.tasks}
    assert labels == {"baseline", "speculative"}
    for task in report.tasks:
        for step in task.steps:
            assert step.segments.total() == pytest.approx(step.wall_s, abs=1e-6)
