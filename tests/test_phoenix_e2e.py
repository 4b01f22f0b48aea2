"""End to end against a real OTLP receiver, Arize Phoenix (see tests/phoenix_server.py).

The demo agent runs on the bundled model and exports live over OTLP/HTTP; recorded trace files
are replayed over gRPC with `agenttrace export`. Every span is then read back through Phoenix's
REST API and must have arrived with its trace, name, parent, times, attributes, events and status.
Phoenix keeps neither span kind nor resource attributes: tests/test_jaeger_json.py checks those.

Runs by default (CI included). The first run builds Phoenix's environment (about a minute and
850 MB, cached); Phoenix then takes about 15 s to start. Deselect with `-m "not e2e"`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from phoenix_server import running_phoenix
from recorded_runs import record_agent_run

from agenttrace.cli import main
from agenttrace.traces.load import load_spans
from agenttrace.traces.records import SpanRecord

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "samples" / "demo-speculative.jsonl"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    with running_phoenix(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


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
        "demo", "--tasks", "2", "--trace-dir", str(tmp_path), "--summary-only",
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
