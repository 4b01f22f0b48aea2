"""The summary of a very large input (issue 17: a folder of 10M spans in bounded memory): tasks
folded into the run figures as they are read (report/runs.ReportFold), each distribution from a
bounded uniform sample (report/stats.Sampler), no task row kept."""

from __future__ import annotations

import numpy as np
import pytest

from agenttrace.bench.synthetic import generate
from agenttrace.cli import main
from agenttrace.report.build import report_streamed
from agenttrace.report.figures import TaskAnalysis
from agenttrace.report.runs import ReportFold, RunFold
from agenttrace.report.stats import Sampler, distribution


def _without(report, *keys):
    data = report.model_dump()
    for k in keys:
        data.pop(k)
    return data


def test_a_sampler_without_a_limit_is_the_distribution_of_every_value():
    values = [0.3, None, 1.5, 0.7, 2.0]
    s = Sampler()
    for v in values:
        s.add(v)
    assert s.distribution() == distribution(values) and not s.sampled


def test_a_sampler_with_a_limit_keeps_a_uniform_sample_and_exact_totals():
    rng = np.random.default_rng(4)
    xs = rng.exponential(2.0, 50_000)
    s = Sampler(2_000, seed=1)
    for x in xs:
        s.add(float(x))
    d = s.distribution()
    assert s.sampled and d.sample == 2_000 and d.count == xs.size
    assert d.mean == pytest.approx(xs.mean(), rel=1e-9) and d.min == xs.min() and d.max == xs.max()
    assert d.p50 == pytest.approx(np.percentile(xs, 50), rel=0.08)  # a uniform sample, not the first 2000
    assert d.p95 == pytest.approx(np.percentile(xs, 95), rel=0.12)


def test_rows_keep_a_distribution_per_column():
    s = Sampler(100, width=2, seed=0)
    for i in range(1_000):
        s.add((float(i), 2.0 * i))
    a, b = s.distributions()
    assert a.count == b.count == 1_000 and a.sample == 100
    assert (a.min, a.max, b.max) == (0.0, 999.0, 1998.0) and b.mean == pytest.approx(2 * a.mean)


def test_a_summary_under_its_sample_size_has_the_figures_of_the_full_report(tmp_path):
    path = tmp_path / "synthetic.jsonl"
    generate(path, 4_000, seed=2)
    full, summary = report_streamed([str(path)]), report_streamed([str(path)], sample=100_000)
    assert summary.tasks == [] and len(full.tasks) > 200
    assert summary.problems[-1].startswith(f"summary of {len(full.tasks)} task(s)")
    assert _without(summary, "tasks", "problems") == _without(full, "tasks", "problems")


def test_a_summary_over_its_sample_size_keeps_counts_and_totals_exact(tmp_path):
    path = tmp_path / "synthetic.jsonl"
    generate(path, 4_000, seed=2)
    full, summary = report_streamed([str(path)]), report_streamed([str(path)], sample=100)
    f, s = full.run, summary.run
    assert (s.tasks, s.steps, s.generations, s.completed) == (f.tasks, f.steps, f.generations, f.completed)
    assert s.segments == f.segments and s.speculation == f.speculation and summary.whatif == full.whatif
    assert s.step_wall.count == f.step_wall.count and s.step_wall.sample == 100 and f.step_wall.sample is None
    assert (s.step_wall.min, s.step_wall.max) == (f.step_wall.min, f.step_wall.max)
    assert s.step_wall.mean == pytest.approx(f.step_wall.mean, rel=1e-9)
    assert s.step_segments.tool.count == f.step_segments.tool.count and s.step_segments.tool.sample == 100


def _folded(tasks, limit) -> RunFold:
    fold = RunFold(limit)
    for t in tasks:
        fold.add(t)
    return fold


@pytest.mark.parametrize("limit", [None, 100])
def test_each_label_is_folded_apart_though_one_label_alone_is_folded_once(tmp_path, limit):
    """The run's fold stands for the first label until a second arrives (here after 250 tasks,
    past a sample of 100): each label's figures are still those of its own tasks folded apart."""
    path = tmp_path / "synthetic.jsonl"
    generate(path, 6_000, seed=3)
    tasks = report_streamed([str(path)]).tasks
    a = [t.model_copy(update={"run_label": "a"}) for t in tasks[:300]]
    b = [t.model_copy(update={"run_label": "b"}) for t in tasks[300:]]
    mixed = [*a[:250], *(t for pair in zip(b[:50], a[250:], strict=True) for t in pair), *b[50:]]
    for order, labels in ((mixed, ("a", "b")), (a, ("a",))):
        fold = ReportFold(limit)
        for t in order:
            fold.add(TaskAnalysis(t, []))
        report = fold.report([], [])
        assert [r.label for r in report.by_label] == list(labels)
        for label, figures in zip(labels, report.by_label, strict=True):
            assert figures == _folded([t for t in order if t.run_label == label], limit).figures(label)
    assert fold.labels == {"a": None}  # one label: folded once, into the run's fold


def test_report_sample_prints_the_summary(tmp_path, capsys):
    path = tmp_path / "synthetic.jsonl"
    generate(path, 2_000, seed=1)
    assert main(["report", str(path), "--sample", "1000", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "## Run summary" in out and "## Tasks" not in out and "summary of" in out
    assert main(["report", str(path), "--sample", "10"]) == 2
    assert "--sample N needs N >= 100" in capsys.readouterr().err
