"""End to end against a real OTLP receiver, Arize Phoenix (see tests/phoenix_server.py).

The demo agent runs on the bundled model and exports live over OTLP/HTTP; recorded trace files
are replayed over gRPC with `agenttrace export`. Every span is then read back through Phoenix's
REST API and must have arrived with its trace, name, parent, times, attributes, events and status.
Phoenix keeps neither span kind nor resource attributes: tests/traces/test_jaeger_json.py checks those.

`agenttrace report --phoenix` then reads recorded traces back from their own projects and must
give the files' report: tasks, steps, attempts, outcomes and figures (times to the microsecond
Phoenix keeps); the run label is the one thing missing (Phoenix keeps no resource).

Runs by default (CI included); one Phoenix serves the session (tests/conftest.py). The first run
builds Phoenix's environment (about a minute and 850 MB, cached); Phoenix then takes about 15 s
to start. Deselect with `-m "not e2e"`.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from phoenix_fake import differences, with_fresh_ids
from recorded_runs import record_agent_run

from agenttrace.cli import main
from agenttrace.traces.load import load_spans
from agenttrace.traces.span_records import SpanRecord

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "demo-speculative.jsonl"
FOREIGN = ROOT / "traces" / "frameworks" / "openai-agents-chat-openinference.jsonl"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
CACHED_ENVIRONMENTS = ("phoenix",)  # built in the background from the session's start (conftest.py)


def _us(iso: str) -> int:
    return (datetime.fromisoformat(iso) - _EPOCH) // timedelta(microseconds=1)


def assert_arrived(recorded: list[SpanRecord], phoenix) -> None:
    """Every recorded span is in Phoenix, as it was recorded (Phoenix may add attributes of its
    own, e.g. OpenInference's llm.*)."""
    assert recorded, "nothing was recorded"
    by_id = phoenix.wait_for_spans({s.span_id for s in recorded})
    missing = [f"{s.name} ({s.span_id})" for s in recorded if s.span_id not in by_id]
    assert not missing, f"{len(missing)} of {len(recorded)} spans never reached Phoenix: {missing[:5]}"
    for s in recorded:
        got = by_id[s.span_id]
        where = f"span {s.name!r} {s.span_id} from {s.source}"
        assert got["context"]["trace_id"] == s.trace_id, where
        assert got["name"] == s.name, where
        assert got["parent_id"] == s.parent_id, where
        # Phoenix turns nanoseconds into a datetime through a float (ns / 1e9): 1 us of slack
        assert abs(_us(got["start_time"]) - s.start_ns // 1000) <= 1, where
        assert abs(_us(got["end_time"]) - s.end_ns // 1000) <= 1, where
        assert got["status_code"] == s.status, where
        if s.status == "ERROR":
            assert got["status_message"] == s.status_message, where
        different = {k: (v, got["attributes"].get(k, "<missing>")) for k, v in s.attributes.items()
                     if got["attributes"].get(k) != v}
        assert not different, f"{where}: attributes recorded vs in Phoenix: {different}"
        assert [e["name"] for e in got["events"]] == [e.name for e in s.events], where


@pytest.mark.model
def test_the_demo_exports_live_over_otlp_http(phoenix, tmp_path, capsys):
    rc = main([
        "demo", "--tasks", "2", "--trace-dir", str(tmp_path), "--summary-only", "--backend", "torch",
        "--otlp", phoenix.http_url, "--otlp-protocol", "http/protobuf",
    ])
    out = capsys.readouterr().out
    assert rc == 0 and "telemetry failures" not in out
    (trace_file,) = tmp_path.glob("demo-*.jsonl")
    loaded = load_spans([trace_file])
    assert loaded.problems == []
    assert {s.segment for s in loaded.spans} >= {"agent", "step", "attempt", "generation", "prefill", "parse"}
    assert len({s.trace_id for s in loaded.spans}) == 2  # one trace per task
    assert_arrived(loaded.spans, phoenix)


def test_recorded_files_replay_over_otlp_grpc(phoenix, tmp_path, capsys):
    # A real demo recording, and a run with failed attempts, a remote parent and a link.
    recorded = tmp_path / "run.jsonl"
    record_agent_run(recorded)
    files = [str(SAMPLE), str(recorded)]
    loaded = load_spans(files)
    assert loaded.problems == [] and any(s.status == "ERROR" for s in loaded.spans)
    assert main(["export", *files, "--otlp", phoenix.grpc_url, "--otlp-protocol", "grpc"]) == 0
    assert f"sent {len(loaded.spans)} spans" in capsys.readouterr().out
    assert_arrived(loaded.spans, phoenix)


def export_to_project(phoenix, recorded: Path, project: str, tmp_path: Path, monkeypatch, capsys) -> Path:
    """A copy of `recorded` with ids of its own (with_fresh_ids), sent with `agenttrace export FILE
    --otlp URL` into `project` (Phoenix's x-project-name header, which the OTLP exporter takes from
    OTEL_EXPORTER_OTLP_HEADERS); returned once Phoenix has all of its spans."""
    path = with_fresh_ids(recorded, tmp_path / f"{project}.jsonl", project)
    spans = load_spans([path]).spans
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-project-name={project}")
    assert main(["export", str(path), "--otlp", phoenix.http_url, "--otlp-protocol", "http/protobuf"]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + 60
    while len(phoenix.spans(project) if _has_project(phoenix, project) else []) < len(spans):
        assert time.monotonic() < deadline, f"{project}: Phoenix did not ingest {len(spans)} spans in 60 s"
        time.sleep(0.5)
    return path


def _has_project(phoenix, project: str) -> bool:
    return project in {p["name"] for p in phoenix.get("/v1/projects", limit=100)["data"]}


def report_json(capsys, *args: str) -> dict:
    assert main(["report", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("recorded", "project"), [(SAMPLE, "ours"), (FOREIGN, "openinference")], ids=["ours", "openinference"])
def test_report_from_phoenix_is_the_files_report(phoenix, recorded, project, tmp_path, monkeypatch, capsys):
    sent = export_to_project(phoenix, recorded, project, tmp_path, monkeypatch, capsys)
    spans = len(load_spans([sent]).spans)
    started = time.monotonic()
    got = report_json(capsys, "--phoenix", phoenix.http_url, "--project", project, "--batch-traces", "2")
    read_s = time.monotonic() - started
    want = report_json(capsys, str(sent))
    assert len(got["tasks"]) == len(want["tasks"]) >= 4
    assert [(t["task_id"], t["outcome"], t["attempts"], [(s["outcome"], s["attempts"]) for s in t["steps"]])
            for t in got["tasks"]] == \
           [(t["task_id"], t["outcome"], t["attempts"], [(s["outcome"], s["attempts"]) for s in t["steps"]])
            for t in want["tasks"]]
    assert differences(want, got) == [], "figures differ beyond the microseconds Phoenix keeps"
    assert got["inputs"][0]["spans"] == spans and got["sources"] == [f"{phoenix.http_url} project {project}"]
    assert any("Phoenix keeps no OTel span kind, resource" in p for p in got["problems"])
    print(f"{project}: {spans} spans read from Phoenix and reported in {read_s:.2f} s")


def test_since_and_until_pick_traces_by_their_start(phoenix, tmp_path, monkeypatch, capsys):
    export_to_project(phoenix, SAMPLE, "window", tmp_path, monkeypatch, capsys)
    traces = phoenix.get("/v1/projects/window/traces", sort="start_time", order="asc", limit=10)["data"]
    assert len(traces) == 4
    got = report_json(capsys, "--phoenix", phoenix.http_url, "--project", "window",
                      "--since", traces[1]["start_time"], "--until", traces[3]["start_time"])
    assert [t["trace_id"] for t in got["tasks"]] == [t["trace_id"] for t in traces[1:3]]
    assert main(["report", "--phoenix", phoenix.http_url, "--project", "window", "--since", "2h"]) == 2
    assert "no traces in" in capsys.readouterr().err  # recorded long before


def test_a_missing_project_is_one_line_naming_those_there(phoenix, capsys):
    assert main(["report", "--phoenix", phoenix.http_url, "--project", "no-such-project"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no project 'no-such-project'" in err and "its projects: " in err

