"""`agenttrace compare`: two files, or two run labels of one set; noise is not a gain."""

from __future__ import annotations

import json
from pathlib import Path

from agenttrace.cli import main
from agenttrace.report.compare import compare_tasks
from agenttrace.report.model import SegmentTimes, SpecFigures, TaskFigures

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def task(wall: float, label: str) -> TaskFigures:
    return TaskFigures(trace_id="t", task_id="x", agent="a", run_label=label, outcome="completed", wall_s=wall,
                       ttvtc_s=wall / 2, time_to_correct_action_s=None, decisions_valid=1, decisions_invalid=0,
                       decision_throughput=1 / wall, attempts=1, valid_attempts=1, segments=SegmentTimes(other=wall),
                       retry_s=0.0, retry_segments=SegmentTimes(), speculation=SpecFigures(), steps=[])


def test_clear_difference_is_a_gain_small_one_is_noise():
    a = [task(1.0 + 0.01 * i, "a") for i in range(20)]
    fast = [task(0.5 + 0.01 * i, "b") for i in range(20)]
    c = compare_tasks(a, fast, a_name="a", b_name="b", resamples=1000)
    rows = {f.figure: f for f in c.figures}
    assert rows["task wall time"].verdict == "gain" and rows["task wall time"].ratio < 0.7
    assert rows["decision throughput (task)"].verdict == "gain" and rows["decision throughput (task)"].better == "higher"
    assert "time to correct action (task)" not in rows  # no task states its expected call
    jitter = [task(1.0 + 0.01 * ((i * 7) % 20) + 0.001, "b") for i in range(20)]
    assert {f.figure: f for f in compare_tasks(a, jitter, a_name="a", b_name="b").figures}["task wall time"].verdict == "noise"


def test_compare_two_files_and_two_labels_on_the_samples(capsys):
    base, spec = SAMPLES / "demo-baseline.jsonl", SAMPLES / "demo-speculative.jsonl"
    assert main(["compare", str(base), str(spec), "--format", "json", "--resamples", "2000"]) == 0
    by_files = json.loads(capsys.readouterr().out)
    assert (by_files["a"], by_files["b"]) == ("baseline", "speculative")
    assert main(["compare", "baseline", "speculative", "--in", str(SAMPLES), "--format", "json", "--resamples", "2000"]) == 0
    by_labels = json.loads(capsys.readouterr().out)
    assert by_files["figures"] == by_labels["figures"]
    rows = {f["figure"]: f for f in by_labels["figures"]}
    for f in by_labels["figures"]:
        assert f["verdict"] in ("gain", "regression", "noise", "n/a")
        if f["ratio"] is not None:
            assert f["low"] <= f["ratio"] <= f["high"]
            assert (f["verdict"] == "noise") == (f["low"] <= 1.0 <= f["high"])
    assert rows["step time: verify"]["verdict"] == "n/a"  # the baseline never verifies
    assert main(["compare", "baseline", "speculative", "--in", str(SAMPLES), "--format", "markdown"]) == 0
    assert "| task wall time |" in capsys.readouterr().out


def test_compare_names_what_is_wrong(capsys, tmp_path):
    assert main(["compare", "baseline", "nope", "--in", str(SAMPLES)]) == 2
    assert "'nope' not found; the traces hold 'baseline', 'speculative'" in capsys.readouterr().err
    assert main(["compare", "baseline", "speculative"]) == 2
    assert "--in" in capsys.readouterr().err


def test_compare_html_page_is_written(tmp_path):
    out = tmp_path / "c.html"
    assert main(["compare", "baseline", "speculative", "--in", str(SAMPLES), "--format", "html", "-o", str(out)]) == 0
    html = out.read_text()
    assert "Comparison: speculative vs baseline" in html and 'class="chart comparison"' in html
