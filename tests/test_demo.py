"""The main job end to end on the bundled model: the demo runs, writes a trace and reports it."""

from __future__ import annotations

import pytest

from agenttrace.examples.agents.demo import DemoOptions, run_demo
from agenttrace.report import report_from_files


@pytest.mark.model
def test_demo_writes_a_trace_whose_report_adds_up(tmp_path, capsys, bundled):
    outcome = run_demo(DemoOptions(tasks=2, arms=("baseline", "speculative"), trace_dir=tmp_path))
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
