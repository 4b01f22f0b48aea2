"""Report figures on hand-built traces with known timings (SPANS.md definitions)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from trace_builder import S, write_trace

from agenttrace.cli import main
from agenttrace.report import report_from_files

SAMPLES_DIR = __import__("pathlib").Path(__file__).resolve().parents[2] / "traces" / "samples"


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
        "prefill": approx(1.0), "draft": approx(0.3), "verify": approx(1.4), "constrain": 0.0, "generation": approx(1.3),
        "parse": approx(0.2), "validation": approx(0.6), "tool": approx(0.5), "network": approx(0.5),
        "queue": 0.0, "memory": 0.0, "compaction": 0.0, "delegation": 0.0, "other": approx(0.2),
    }
    assert s1.segments.total() == approx(s1.wall_s) == approx(6.0)
    assert s1.ttvtc_s == approx(4.8)
    assert s1.retry_s == approx(2.5)
    assert s1.retry_segments.model_dump() == {
        "prefill": approx(0.5), "draft": approx(0.1), "verify": approx(0.6), "constrain": 0.0, "generation": approx(0.8),
        "parse": approx(0.1), "validation": approx(0.4), "tool": 0.0, "network": 0.0, "queue": 0.0, "memory": 0.0,
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


def test_the_report_paths_never_import_torch(tmp_path):
    path = tmp_path / "known.jsonl"
    write_trace(path, known_task(), resource={"agenttrace.run.label": "a"})
    write_trace(tmp_path / "b.jsonl", known_task(), resource={"agenttrace.run.label": "b"})
    code = (
        "import sys, contextlib, io; from agenttrace.cli import main; d = sys.argv[1]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    for fmt in ('terminal', 'json', 'markdown', 'html'):\n"
        "        main(['report', d, '--format', fmt, '-o', d + '/out.' + fmt])\n"
        "    main(['compare', 'a', 'b', '--in', d, '--format', 'json', '--resamples', '100'])\n"
        "    main(['report', '--jaeger', 'http://127.0.0.1:9', '--service', 's', '--format', 'json'])\n"
        "import agenttrace.telemetry, agenttrace.traces.load, agenttrace.traces.jaeger_input, agenttrace.report.html\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "print('HEAVY', bad, file=sys.stderr); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_truncated_file_still_gives_its_steps_as_a_partial_task(tmp_path):
    from trace_builder import to_otlp

    request = to_otlp(known_task())
    spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    agent = next(s for s in spans if s["name"].startswith("invoke_agent"))
    spans.remove(agent)  # parents end last: a file cut short loses the agent span first
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(request) + "\n" + json.dumps(to_otlp(known_task()))[:200] + "\n")
    report = report_from_files([str(path)])
    (task,) = report.tasks
    assert task.partial and task.outcome == "unknown" and [s.index for s in task.steps] == [1, 2]
    assert task.steps[0].ttvtc_s == pytest.approx(4.8) and task.wall_s == pytest.approx(9.5)
    assert task.segments.total() == pytest.approx(9.5)
    assert report.run.tasks == 0 and report.run.partial_tasks == 1 and report.run.steps == 2
    text = "\n".join(report.problems)
    assert f"{path}:2: not valid JSON" in text
    assert "name a parent that is not in the input" in text and "marked partial" in text


def test_time_to_correct_action_per_step_and_figures_per_generation(tmp_path):
    path = tmp_path / "known.jsonl"
    write_trace(path, known_task())
    (task,) = report_from_files([str(path)]).tasks
    s1, s2 = task.steps
    assert s1.time_to_correct_action_s == pytest.approx(4.8) and s2.time_to_correct_action_s is None
    assert task.expects_correct_action
    g1, g2 = s1.generations
    assert (g1.attempt, g2.attempt, g1.method, g1.rounds, g1.draft_tokens) == (1, 2, "prompt_lookup", 4, 12)
    assert g1.prefill_s == pytest.approx(0.5) and g1.decode_s_per_token == pytest.approx(1.5 / 20)
    assert g2.start_s == pytest.approx(2.5) and g2.acceptance_rate == pytest.approx(0.5)


def test_json_schema_is_documented(capsys):
    assert main(["report", "--json-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Report" and "by_label" in schema["properties"]
    assert "description" in schema["$defs"]["WhatIf"]["properties"]["alpha"]


def test_the_committed_samples_report_without_the_model():
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "traces" / "samples"
    report = report_from_files([str(samples)])
    assert report.problems == []
    labels = {t.run_label for t in report.tasks}
    assert labels == {"baseline", "speculative"}
    for task in report.tasks:
        for step in task.steps:
            assert step.segments.total() == pytest.approx(step.wall_s, abs=1e-6)


def test_the_committed_samples_in_every_format(tmp_path, capsys):
    assert main(["report", str(SAMPLES_DIR), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "## Run summary" in md and "| figure | baseline | speculative |" in md and "## Speculation what-if" in md
    assert main(["report", str(SAMPLES_DIR), "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    assert "Comparison: speculative vs baseline" in (tmp_path / "r.html").read_text()
    assert main(["report", str(SAMPLES_DIR), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in data["by_label"]] == ["baseline", "speculative"]
    (w,) = data["whatif"]
    assert w["label"] == "speculative" and w["actual_k"] == 3 and 0 < w["alpha"] < 1 and w["best_k"] >= 1
