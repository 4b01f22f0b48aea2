"""Other instrumentations' traces read in shares of whole traces, one per core (columnar/shares.py):
the shares hold whole traces in the order they first appear, worker processes read theirs from
the files, and the summary or report is the one a single reading gives, the per-span path's; a
worker that fails costs nothing."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from agenttrace.columnar import shares
from agenttrace.columnar.engine import report_files
from agenttrace.report.build import report_streamed

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ROOT / "traces" / "frameworks"


def test_shares_are_runs_of_whole_traces_in_the_order_they_first_appear():
    # trace t{k} first appears at 10k, its spans 25 apart: t0's run on past where t2, t3 and t4 begin
    order = {}
    for k, size in enumerate([5, 1, 3, 3, 1, 7]):
        for n in range(size):
            order[(f"t{k}", f"s{n}")] = 10 * k + 25 * n
    parts = shares.split(order, 3)
    assert sum(len(p) for p in parts) == len(order) and len(parts) == 3
    traces = [sorted({t for t, _ in p}) for p in parts]
    # whole traces, runs in first-appearance order, each where its middle span falls (6, 7, 7 spans)
    assert traces == [["t0", "t1"], ["t2", "t3", "t4"], ["t5"]]
    assert shares.split(order, 1) == [order]
    assert shares.split({("t", "s"): 0}, 4) == [{("t", "s"): 0}]  # never an empty share


def test_a_shares_traces_are_read_again_whole_a_batch_at_a_time_in_the_order_they_first_appear(tmp_path):
    from agenttrace.bench.synthetic import generate
    from agenttrace.columnar.load import LINE_STRIDE
    from agenttrace.columnar.per_trace import FileRange, file_traces
    from agenttrace.traces.stream import file_lines, line_spans

    # two files whose lines each hold spans of several traces, a trace's spans over several lines
    generate(tmp_path / "synthetic.jsonl", 1_500, seed=3)
    files, order, first, expected = [], {}, 0, []
    for path in (tmp_path / "synthetic.jsonl", ROOT / "traces" / "long_horizon" / "demo-long_horizon.jsonl"):
        top = first
        for k, (_, line) in enumerate(file_lines(path)):
            for pos, s in enumerate(line_spans(line, "", [])):
                order[(s.trace_id, s.span_id)] = top = first + k * LINE_STRIDE + pos
                expected.append(s)
        files.append(FileRange(path, first, top))
        first = top + 1
    rank = {}
    for s in expected:
        rank.setdefault(s.trace_id, len(rank))
    expected.sort(key=lambda s: rank[s.trace_id])
    problems: list[str] = []
    batches = list(file_traces(files, order, problems, 100))
    assert problems == [] and len(batches) >= 3  # (a batch is handed on after a line: 512 spans here)
    assert [(s.trace_id, s.span_id) for b in batches for s in b] == [(s.trace_id, s.span_id) for s in expected]
    assert all(len(b) >= 100 for b in batches[:-1])
    assert not {s.trace_id for s in batches[0]} & {s.trace_id for b in batches[1:] for s in b}  # whole traces
    # a span the table did not count (the lines read otherwise): a problem, and nothing more is read
    fewer = {k: v for k, v in order.items() if k != (expected[0].trace_id, expected[0].span_id)}
    assert list(file_traces(files, fewer, problems, 10 ** 9)) == [] and "did not count" in problems[0]


@pytest.fixture(scope="module")
def frameworks(tmp_path_factory) -> Path:
    """Every framework's trace (OpenInference, OpenLLMetry, GenAI, ADK, ...) beside our demo's."""
    folder = tmp_path_factory.mktemp("frameworks")
    for f in [ROOT / "traces" / "samples" / "demo-speculative.jsonl", *FRAMEWORKS.glob("*.jsonl")]:
        shutil.copy(f, folder / f.name)
    return folder


def _figures(report) -> dict:
    doc = report.model_dump(mode="json")
    return {k: doc[k] for k in ("run", "by_label", "whatif", "roofline", "inputs", "problems")}


def _count_workers(monkeypatch, cores: int = 3) -> list[bool]:
    """Whether each worker process gave its share (False: it failed, and its share was read here),
    on `cores` cores whatever the machine's, shares of any size."""
    monkeypatch.setattr(shares, "_cores", lambda: cores)
    monkeypatch.setattr(shares, "MIN_SPANS", 0)
    ran: list[bool] = []
    monkeypatch.setattr(shares, "_finish", lambda proc, task, f=shares._finish: ran.append(
        (got := f(proc, task)) is not None) or got)
    return ran


@pytest.fixture(scope="module")
def reference(frameworks):
    """The per-span path's report of them."""
    return report_streamed([str(frameworks)])


def test_a_summary_read_in_shares_by_worker_processes_is_the_per_span_paths(frameworks, reference, monkeypatch):
    # each share read 40 spans at a time (its parts added up)
    monkeypatch.setattr(shares, "SPANS_PER_BATCH", 40)
    ran = _count_workers(monkeypatch)
    outcome = report_files([frameworks], threads=3, summary_only=True)
    assert outcome.reason is None and outcome.per_trace_spans > 0
    assert ran == [True, True]  # two worker processes, the third share read here
    assert outcome.workers_peak_mb > 0 or sys.platform != "linux"  # (their peak, from /proc)
    assert _figures(outcome.report) == _figures(reference)
    assert any(i.inferred for i in outcome.report.inputs) and any(i.left_out for i in outcome.report.inputs)


def test_a_report_read_in_shares_by_worker_processes_is_the_per_span_paths(frameworks, reference, monkeypatch):
    # a report's shares are all read by workers (this process runs the queries meanwhile), their
    # tasks join the queries' in the report's order
    monkeypatch.setattr(shares, "SPANS_PER_BATCH", 40)
    ran = _count_workers(monkeypatch)
    outcome = report_files([frameworks], threads=2)
    assert outcome.reason is None and outcome.per_trace_spans > 0 and ran == [True, True]
    assert outcome.report.model_dump_json() == reference.model_dump_json()


def test_never_more_shares_than_cores_or_than_the_spans_fill(monkeypatch):
    monkeypatch.setattr(shares, "_cores", lambda: 4)
    assert shares.count(8, 10 ** 7) == 4 and shares.count(3, 10 ** 7) == 3 and shares.count(1, 10 ** 7) == 1
    assert shares.count(4, 2 * shares.MIN_SPANS - 1) == 1 and shares.count(4, 3 * shares.MIN_SPANS) == 3
    monkeypatch.setattr(shares, "_cores", lambda: 64)
    assert shares.count(64, 10 ** 9) == shares.MAX_PROCESSES


def test_a_worker_that_fails_costs_nothing(frameworks, reference, monkeypatch):
    monkeypatch.setattr(shares, "_command", lambda: ([sys.executable, "-c", "import sys; sys.exit(3)"], {}))
    ran = _count_workers(monkeypatch)
    outcome = report_files([frameworks], threads=2, summary_only=True)
    assert ran == [False] and outcome.reason is None
    assert _figures(outcome.report) == _figures(reference)
    outcome = report_files([frameworks], threads=2)
    assert ran == [False, False, False] and outcome.report.model_dump_json() == reference.model_dump_json()
