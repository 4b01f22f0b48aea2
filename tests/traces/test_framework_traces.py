"""Reports on real agent frameworks' traces against their ground truth (tests/frameworks/).

Each recording under traces/frameworks/ is one framework (OpenAI Agents SDK, LangGraph,
smolagents, LlamaIndex, CrewAI, AutoGen, pydantic-ai, ...) driving the same weather agent through
four cases (a retried call, two parallel calls, a tool that raises, a sub-agent) against a
loopback fake OpenAI server, traced by that framework's usual instrumentation, with the truth
from the run's own clocks. The report must give the truth: tasks, steps, attempts, retries and
outcomes exactly, TTVTC and tool time within 20 ms (tests/frameworks/compare.py). Re-recording is
`./scripts/record-frameworks`; the e2e test at the end records two frameworks afresh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ROOT / "tests" / "frameworks"
RECORDED = ROOT / "traces" / "frameworks"
sys.path.insert(0, str(FRAMEWORKS))

from compare import figures  # noqa: E402

from agenttrace.cli import main  # noqa: E402
from agenttrace.report.build import report_from_files, report_streamed  # noqa: E402

TRUTHS = sorted(RECORDED.glob("*.truth.json"))
# the two re-recorded at the end, built in the background from the session's start (conftest.py)
_TIMES = {"ttvtc_s", "tool_s"}  # the figures compared within a tolerance, not exactly
CACHED_ENVIRONMENTS = ("framework:openai_agents:requirements.txt", "framework:pydantic_ai:requirements.txt")


def _differences(report, truth) -> list[str]:
    return [f"task {f.task} ({truth['tasks'][f.task - 1]['case'] if f.task else ''}) {f.name}: truth {f.truth!r}, "
            f"report {f.report!r}" for f in figures(report, truth) if not f.ok]


@pytest.mark.parametrize("truth_path", TRUTHS, ids=[p.name.removesuffix(".truth.json") for p in TRUTHS])
def test_the_report_of_a_recorded_framework_trace_gives_its_truth(truth_path):
    truth = json.loads(truth_path.read_text())
    trace = truth_path.with_name(truth_path.name.removesuffix(".truth.json") + ".jsonl")
    assert all(t["error"] is None and t["outcome"] == "completed" for t in truth["tasks"]), "a recorded task failed"
    for report in (report_streamed([str(trace)]), report_from_files([str(trace)])):  # both readers of files
        assert _differences(report, truth) == []
        assert report.problems == []
        cannot = set(truth["expect_not_inferred"])
        assert all({m.figure for m in t.not_inferred} == cannot for t in report.tasks)
        (seen,) = report.inputs
        assert seen.conventions and ({"steps and attempts", "decision moments (TTVTC)"} <= set(seen.inferred) or cannot)


def test_every_framework_the_issue_names_is_recorded():
    names = {p.name.removesuffix(".truth.json") for p in TRUTHS}
    for prefix in ("openai-agents-chat", "openai-agents-responses", "langgraph-create_agent-openinference",
                   "langgraph-react-openinference", "langgraph-create_agent-openllmetry", "langgraph-react-openllmetry",
                   "smolagents", "llamaindex", "crewai", "autogen-native", "autogen-openinference", "pydantic-ai"):
        assert any(n.startswith(prefix) for n in names), f"no recording of {prefix}"


def _without_model_calls(trace: Path, out: Path) -> Path:
    """The trace with its model calls and tool executions dropped (and the delegating task's
    trace, whose sub-agent would lose its parent): nothing to infer steps from."""
    docs = [json.loads(line) for line in trace.read_text().splitlines()]
    spans = [s for d in docs for rs in d["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    delegating = {s["traceId"] for s in spans if s["name"] == "ask_expert"}

    def kind(s: dict) -> str:
        return next((a["value"].get("stringValue") for a in s["attributes"] if a["key"] == "openinference.span.kind"), "")

    for d in docs:
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ss["spans"] = [s for s in ss["spans"] if s["traceId"] not in delegating and kind(s) not in ("LLM", "TOOL")]
    out.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return out


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "json", "html"])
def test_every_format_says_what_it_could_not_infer_and_why(fmt, tmp_path, capsys):
    trace = _without_model_calls(RECORDED / "openai-agents-chat-openinference.jsonl", tmp_path / "agents-only.jsonl")
    out = tmp_path / f"report.{fmt}"
    assert main(["report", str(trace), "--format", fmt, *(["-o", str(out)] if fmt != "terminal" else [])]) == 0
    text = capsys.readouterr().out if fmt == "terminal" else out.read_text()
    text = " ".join(text.split())  # a terminal wraps long notes at 160 columns
    if fmt == "json":
        tasks = json.loads(text)["tasks"]
        assert len(tasks) == 3
        for t in tasks:
            assert {m["figure"]: m["reason"] for m in t["not_inferred"]} == {
                "steps": "no model call or tool execution under this agent span",
                "TTVTC": "no step, so no decision",
                "outcome": "no step inferred, and the agent span records no outcome"}
    else:
        for said in ("not inferred: steps (no model call or tool execution under this agent span)",
                     "outcome (no step inferred, and the agent span records no outcome)"):
            assert said in text
        if fmt != "html":  # the run summary counts them
            assert "steps in 3 task(s), TTVTC in 3 task(s), outcome in 3 task(s)" in text


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["openai-agents-chat-openinference", "pydantic-ai-native"])
def test_recording_a_framework_afresh_gives_a_trace_whose_report_is_its_truth(name, tmp_path):
    import record

    (rec,) = [r for r in record.recordings() if r.name == name]
    for attempt in (1, 2):
        trace, truth_path = record.record(rec, tmp_path / f"attempt{attempt}")
        truth = json.loads(truth_path.read_text())
        assert all(t["error"] is None for t in truth["tasks"])
        report = report_streamed([str(trace)])
        missed = {f.name for f in figures(report, truth) if not f.ok}
        # A span measures the framework's own work around a tool body too; on a busy 2-core machine
        # that once took 88 ms for a raising body (CI), past the 20 ms tolerance. Such a stall shows
        # as a time alone: recorded once more, it must not recur. Anything else fails at once.
        if not missed or not missed <= _TIMES:
            break
    assert _differences(report, truth) == []
