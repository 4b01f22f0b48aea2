"""The fast path of the report (issue 17): trace files streamed as whole traces (traces/stream.py,
the typed decoder of traces/otlp_fast.py) and analysed batch by batch (report/batched.py) give
the figures the one-pass report gives, on recorded runs, on the bench's synthetic traces and on
every file of the malformed corpus; memory holds the open traces, not the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_traces import build_corpus

from agenttrace.bench.synthetic import generate
from agenttrace.errors import NotTyped
from agenttrace.report import report_from_files
from agenttrace.report.build import report_streamed
from agenttrace.traces import stream
from agenttrace.traces.otlp_fast import decode_request
from agenttrace.traces.otlp_json import spans_from_request

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def figures(report) -> dict:
    """Everything the report computes (its problems apart: their order may differ)."""
    data = report.model_dump()
    data.pop("problems")
    return data


def test_the_samples_report_the_same_figures_and_json():
    legacy, fast = report_from_files([str(SAMPLES)]), report_streamed([str(SAMPLES)])
    assert fast.model_dump_json() == legacy.model_dump_json()


def test_the_bench_synthetic_traces_report_the_same(tmp_path):
    path = tmp_path / "synthetic.jsonl"
    generate(path, 6_000, seed=3)
    legacy, fast = report_from_files([str(path)]), report_streamed([str(path)])
    assert len(fast.tasks) > 300
    assert fast.model_dump_json() == legacy.model_dump_json()


def test_a_folder_streams_in_batches_holding_only_open_traces(tmp_path, monkeypatch):
    path = tmp_path / "synthetic.jsonl"
    generate(path, 6_000, seed=4)
    most = []
    real = stream._Streamer.take

    def take(self, spans):
        real(self, spans)
        most.append(sum(len(t.spans) for t in self.open.values()))

    monkeypatch.setattr(stream._Streamer, "take", take)
    problems: list[str] = []
    batches = list(stream.stream_traces([str(path)], problems, lag=2, batch_spans=500))
    assert problems == [] and len(batches) > 5
    assert sum(len(b.spans) for b in batches) == 6_000 + (sum(len(b.spans) for b in batches) - 6_000)
    # at most the traces whose root has not come yet, plus the last two lines (512 spans a line)
    assert max(most) < 3 * 512 + 200
    seen = [s.trace_id for b in batches for s in b.spans]
    assert len(set(seen)) == len({(b_i, s.trace_id) for b_i, b in enumerate(batches) for s in b.spans})  # whole traces


def test_a_trace_split_across_lines_and_files_is_still_one_task(tmp_path):
    lines = (SAMPLES / "demo-speculative.jsonl").read_text().splitlines()
    (tmp_path / "a.jsonl").write_text(lines[0] + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[1:]) + "\n")
    legacy, fast = report_from_files([str(tmp_path)]), report_streamed([str(tmp_path)])
    assert figures(fast) == figures(legacy)


def test_the_typed_decoder_gives_what_the_general_reader_gives_or_steps_aside():
    for f in sorted(SAMPLES.glob("*.jsonl")):
        for n, line in enumerate(f.read_bytes().splitlines(), 1):
            a, b = decode_request(line, f"x:{n}", []), list(spans_from_request(json.loads(line), f"x:{n}", []))
            assert a == b
            assert [s.segment for s in a] == [s.segment for s in b]
    snake = json.dumps({"resource_spans": [{"scope_spans": [{"spans": [{"trace_id": "ab" * 16, "span_id": "cd" * 8}]}]}]})
    with pytest.raises(NotTyped):
        decode_request(snake.encode(), "x:1", [])


def test_every_file_of_the_malformed_corpus_reports_the_same_figures_and_problems(tmp_path):
    (tmp_path / "fuzz").mkdir()
    corpus = build_corpus(tmp_path / "fuzz", seed=19)
    mismatched = []
    for case in corpus:
        legacy, fast = report_from_files([str(case.path)]), report_streamed([str(case.path)])
        if figures(fast) != figures(legacy) or sorted(fast.problems) != sorted(legacy.problems):
            mismatched.append(case.kind)
    assert not mismatched, f"{len(mismatched)} of {len(corpus)} differ: {mismatched[:20]}"
