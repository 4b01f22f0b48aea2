"""The README's wrapped agent: a plain loop traced in under 15 added lines, run for real against
`agenttrace serve`, gives a report with steps, outcomes and time to valid tool call."""

from __future__ import annotations

from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

import agenttrace as at  # noqa: E402
from agenttrace import MonotonicClock, report_from_files  # noqa: E402
from agenttrace.serve.server import BackgroundServer, build_engine  # noqa: E402
from agenttrace.testing import capture_telemetry  # noqa: E402

SOURCE = Path(__file__).resolve().parents[2] / "agents" / "plain_agent.py"


def test_tracing_adds_fewer_than_15_lines():
    added = [line for line in SOURCE.read_text().splitlines() if line.rstrip().endswith("# +trace")]
    assert 5 <= len(added) < 15


@pytest.mark.model
def test_the_wrapped_plain_agent_gets_a_full_report(bundled, tmp_path):
    from agenttrace.examples.agents import plain_agent

    server_tel, _ = capture_telemetry(MonotonicClock())
    trace = tmp_path / "plain.jsonl"
    with BackgroundServer(build_engine(bundled, server_tel)) as server:
        at.configure(trace_file=trace, service_name="plain-agent")
        try:
            client = at.wrap_openai(openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0))
            answer = plain_agent.run(client, server.engine.model_name, "What's the weather like in Paris right now?", 1)
        finally:
            at.shutdown()
    report = report_from_files([str(trace)])
    (task,) = report.tasks
    assert task.agent == "plain-agent" and task.outcome in ("completed", "failed", "budget_exhausted")
    assert (task.outcome == "completed") == (answer is not None)
    assert len(task.steps) == 1 and task.attempts == 1
    assert task.segments.generation > 0 and abs(task.segments.total() - task.wall_s) < 1e-6
    assert task.decisions_valid + task.decisions_invalid >= 1
    if task.decisions_valid:
        assert task.ttvtc_s is not None and 0 < task.ttvtc_s <= task.wall_s
        assert task.decision_throughput > 0
