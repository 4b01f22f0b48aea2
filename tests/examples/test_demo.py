"""The main job end to end on the bundled model: the demo runs, writes a trace and reports it."""

from __future__ import annotations

import pytest

from agenttrace.examples.agents.demo import DemoOptions, run_demo
from agenttrace.report import report_from_files


@pytest.mark.model
def test_demo_writes_a_trace_whose_report_adds_up(tmp_path, capsys, bundled):
    outcome = run_demo(DemoOptions(tasks=2, arms=("baseline", "speculative"), trace_dir=tmp_path, backend="torch"))
    out = capsys.readouterr().out
    assert "run summary" in out and "arms side by side" in out
    files = sorted(tmp_path.glob("demo-*.jsonl"))
    assert [f.name.rsplit("-", 1)[1] for f in files] == ["baseline.jsonl", "speculative.jsonl"]
    for f in files:
        report = report_from_files([str(f)])
        assert report.problems == [] and len(report.tasks) == 2
        for task in report.tasks:
            for step in task.steps:
                assert step.segments.total() == pytest.approx(step.wall_s, abs=1e-6)
    spec = report_from_files([str(files[1])]).run.speculation
    # the default drafter: prompt lookup, then the shipped EAGLE head where lookup finds nothing
    assert spec.methods == ["prompt_lookup+eagle"] and spec.rounds > 0
    # greedy: speculation must not change a single output
    assert outcome.identical_outputs
    assert [len(r) for r in outcome.results.values()] == [2, 2]


@pytest.mark.model
def test_the_long_horizon_demo_reports_memory_compaction_and_delegation(tmp_path, capsys, bundled):
    """Its first three tasks on the bundled model (about 90 s on 2 cores): a fact from memory, a
    delegation, and two documents that pass the compaction budget."""
    outcome = run_demo(DemoOptions(suite="long_horizon", tasks=3, arms=("speculative",), trace_dir=tmp_path,
                                  backend="torch"))
    out = capsys.readouterr().out
    assert "by stage (critical path)" in out and "compaction" in out
    (trace,) = tmp_path.glob("demo-*.jsonl")
    assert (tmp_path / trace.stem / "memory.sqlite").is_file()  # the memory file beside the trace
    report = report_from_files([str(trace)])
    assert report.problems == [] and len(report.tasks) == 3
    mem, deleg, docs = report.tasks
    assert (mem.agent, deleg.agent, docs.agent) == ("assistant", "coordinator", "reader")
    assert mem.segments.memory > 0  # the runtime's own recall at least
    assert deleg.sub_agents >= 1 and deleg.stages.delegation_overhead > 0
    assert docs.compactions == 1 and docs.stages.compaction > 0.5 * docs.wall_s
    assert docs.reprefill_tokens is not None
    for task in report.tasks:
        assert task.stages.total() == pytest.approx(task.wall_s, rel=1e-6)
    assert len(outcome.results["speculative"]) == 3


@pytest.mark.model
def test_the_demo_on_llama_cpp_kernels_says_so_and_speculation_changes_nothing(tmp_path, capsys):
    pytest.importorskip("llama_cpp_py_sync", reason="the llamacpp extra is not installed")
    outcome = run_demo(DemoOptions(tasks=2, arms=("baseline", "speculative"), trace_dir=tmp_path, backend="llama.cpp"))
    out = capsys.readouterr().out
    assert "gguf weights, on llama.cpp's kernels" in out and "drafts with prompt lookup" in out
    assert outcome.identical_outputs and [len(r) for r in outcome.results.values()] == [2, 2]
    report = report_from_files([str(outcome.files["speculative"])])
    assert report.problems == [] and report.run.speculation.methods == ["prompt_lookup"]
    assert report.run.speculation.rounds > 0
