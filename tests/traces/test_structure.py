"""The reading of other instrumentations' traces (agenttrace/traces/members.py, turns.py,
structure.py), one rule per test, on hand-built OpenInference traces with exact times. The
recorded frameworks (tests/traces/test_framework_traces.py) check the same rules end to end."""

from __future__ import annotations

import pytest
from trace_builder import foreign, write_trace

from agenttrace.report.build import report_from_files, report_streamed

OI = "openinference.span.kind"


def agent(name, start, end, *children, error=None):
    return foreign(name, start, end, {OI: "AGENT"}, list(children), error=error)


def chain(name, start, end, *children, error=None):
    return foreign(name, start, end, {OI: "CHAIN"}, list(children), error=error)


def llm(start, end, *, children=(), events=(), **attrs):
    s = foreign("ChatCompletion", start, end, {OI: "LLM", "llm.model_name": "m", **attrs}, list(children))
    s.events = list(events)
    return s


def tool(name, start, end, *children, error=None, **attrs):
    return foreign(name, start, end, {OI: "TOOL", "tool.name": name, **attrs}, list(children), error=error)


def report(tmp_path, *roots):
    path = tmp_path / "t.jsonl"
    write_trace(path, *roots)
    streamed, whole = report_streamed([str(path)]), report_from_files([str(path)])
    assert [t.model_dump(exclude={"waterfall"}) for t in streamed.tasks] == [t.model_dump(exclude={"waterfall"}) for t in whole.tasks]
    return streamed


def shape(task):
    return [(s.outcome, s.attempts) for s in task.steps]


def test_an_agent_span_that_only_wraps_another_is_one_task_named_after_the_inner_one(tmp_path):
    inner = agent("weather_agent", 0.01, 0.39,
                  chain("turn", 0.01, 0.2, llm(0.02, 0.1), tool("weather", 0.11, 0.19)),
                  chain("turn", 0.2, 0.38, llm(0.21, 0.3)))
    (task,) = report(tmp_path, agent("workflow", 0.0, 0.4, chain("workflow", 0.0, 0.4, inner))).tasks
    assert shape(task) == [("tool_call", 1), ("final_answer", 1)]
    assert (task.agent, task.outcome, task.sub_agents) == ("weather_agent", "completed", 0)
    assert task.ttvtc_s == pytest.approx(0.1)


def test_an_agent_inside_a_tool_is_a_sub_agent_with_steps_of_its_own(tmp_path):
    sub = agent("expert", 0.12, 0.28, llm(0.13, 0.2), tool("weather", 0.2, 0.25), llm(0.25, 0.27))
    root = agent("main", 0.0, 0.4, llm(0.0, 0.1), tool("ask_expert", 0.11, 0.3, sub), llm(0.31, 0.39))
    (task,) = report(tmp_path, root).tasks
    assert shape(task) == [("tool_call", 1), ("final_answer", 1)]
    assert task.sub_agents == 1 and task.attempts == 4  # the sub-agent's attempts count, as our runtime's do
    # its tool, and the delegating tool's own time before (0.01) and after (0.02) the sub-agent
    assert task.segments.tool == pytest.approx(0.05 + 0.01 + 0.02, abs=1e-6)


def test_graph_nodes_labelled_agent_under_an_agent_that_calls_no_model_are_transparent(tmp_path):
    root = agent("graph", 0.0, 0.5,
                 agent("agent", 0.0, 0.1, llm(0.01, 0.09)), chain("tools", 0.1, 0.2, tool("weather", 0.11, 0.19, error="bad")),
                 agent("agent", 0.2, 0.3, llm(0.21, 0.29)), chain("tools", 0.3, 0.4, tool("weather", 0.31, 0.39)),
                 agent("agent", 0.4, 0.5, llm(0.41, 0.49)))
    (task,) = report(tmp_path, root).tasks
    assert shape(task) == [("tool_call", 2), ("final_answer", 1)] and task.sub_agents == 0


def test_a_failed_step_span_with_no_tool_under_it_is_a_refused_call_and_its_retry(tmp_path):
    root = agent("smol", 0.0, 0.4, chain("Step 1", 0.0, 0.1, llm(0.01, 0.09), error="argument not in schema"),
                 chain("Step 2", 0.1, 0.3, llm(0.11, 0.19), tool("weather", 0.2, 0.29)),
                 chain("Step 3", 0.3, 0.4, llm(0.31, 0.38), tool("final_answer", 0.38, 0.39)))
    (task,) = report(tmp_path, root).tasks
    assert shape(task) == [("tool_call", 2), ("final_answer", 1)]
    assert (task.outcome, task.attempts, task.valid_attempts) == ("completed", 3, 2)
    assert task.ttvtc_s == pytest.approx(0.19)
    # final_answer is the answer: from the step's start (its model call's) to that call's end
    assert task.steps[1].ttvtc_s == pytest.approx(0.07)


def test_a_failed_tool_retried_by_an_answer_is_one_step_as_our_runtime_counts_it(tmp_path):
    root = agent("a", 0.0, 0.3, llm(0.0, 0.1), tool("forecast", 0.1, 0.2, error="down"), llm(0.2, 0.3))
    (task,) = report(tmp_path, root).tasks
    assert shape(task) == [("final_answer", 2)] and task.retry_s == pytest.approx(0.2)


def test_llm_spans_that_end_before_their_streamed_call_are_one_generation_with_the_step_around_them(tmp_path):
    def step(start):
        return chain("run_agent_step", start, start + 0.1, llm(start, start + 0.002),
                     llm(start + 0.002, start + 0.004, events=[("First Token Stream Event", start + 0.05, {})],
                         **{"llm.finish_reason": "stop"}))

    root = chain("FunctionAgent.run", 0.0, 0.35, step(0.0), chain("call_tool", 0.11, 0.2, tool("weather", 0.12, 0.19)),
                 step(0.21))
    (task,) = report(tmp_path, root).tasks
    assert shape(task) == [("tool_call", 1), ("final_answer", 1)]
    assert task.ttvtc_s == pytest.approx(0.1)  # the step's end, not the LLM span's
    assert task.segments.generation == pytest.approx(0.2, abs=1e-6)  # the layers inside count as the call's time
    assert "model call boundaries" in task.inferred


def test_a_model_call_left_open_across_its_tools_ends_when_they_start(tmp_path):
    root = agent("adk", 0.0, 0.3, llm(0.0, 0.2), tool("weather", 0.1, 0.19), llm(0.2, 0.3))
    (task,) = report(tmp_path, root).tasks
    assert task.ttvtc_s == pytest.approx(0.1) and task.segments.tool == pytest.approx(0.09)
    assert task.overlap_s == 0


def test_a_childless_span_enclosing_its_sibling_is_its_parent_not_a_parallel_branch(tmp_path):
    root = agent("a", 0.0, 0.2, chain("call_model", 0.0, 0.1), chain("RunnableSequence", 0.001, 0.099, llm(0.002, 0.098)),
                 llm(0.1, 0.2))
    (task,) = report(tmp_path, root).tasks
    assert task.overlap_s == 0 and [s.start_s for s in task.steps] == pytest.approx([0.002, 0.1])


def test_an_llm_span_holding_the_tools_is_not_a_model_call_and_the_report_says_why(tmp_path):
    root = agent("adk", 0.0, 0.3, llm(0.0, 0.3, children=[tool("weather", 0.1, 0.2)]))
    (task,) = report(tmp_path, root).tasks
    assert task.steps == [] and task.outcome == "unknown"
    said = {m.figure: m.reason for m in task.not_inferred}
    assert said["steps"].startswith("the only LLM span ('ChatCompletion') holds the tool executions")
    assert set(said) == {"steps", "TTVTC", "outcome"}


def test_a_tool_failure_only_the_next_model_call_was_told_of_fails_its_attempt(tmp_path):
    call = {"llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "weather",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"town": "Paris"}'}
    told = {"llm.input_messages.3.function.0": '{"name": "weather", "content": "missing city", "call_id": "c1", "is_error": true}'}
    root = agent("autogen", 0.0, 0.4, llm(0.0, 0.1, **call), tool("weather", 0.1, 0.11, **{"tool.parameters": '{"town": "Paris"}'}),
                 llm(0.12, 0.2, **told), tool("weather", 0.2, 0.3), llm(0.3, 0.4))
    (task,) = report(tmp_path, root).tasks
    assert shape(task) == [("tool_call", 2), ("final_answer", 1)]
    assert "tool failures (from the next model call's input)" in task.inferred


def test_a_task_whose_last_step_is_a_tool_call_has_an_unknown_outcome_and_says_why(tmp_path):
    (task,) = report(tmp_path, agent("a", 0.0, 0.2, llm(0.0, 0.1), tool("weather", 0.1, 0.2))).tasks
    assert task.outcome == "unknown"
    assert [m.figure for m in task.not_inferred] == ["outcome"]
    assert "last step ended in a tool call" in task.not_inferred[0].reason


def test_normalise_tells_an_observer_each_span_once_with_the_role_it_mapped():
    from agenttrace import semconv as sc
    from agenttrace.traces import normalise
    from agenttrace.traces.conventions import classify
    from agenttrace.traces.span_records import SpanRecord

    def span(sid: str, parent: str | None, name: str, attrs: dict) -> SpanRecord:
        return SpanRecord("ab" * 16, sid * 16, parent and parent * 16, name, "INTERNAL", 0, 10, attrs)

    spans = [span("1", None, "agent", {sc.OI_SPAN_KIND: "AGENT"}),
             span("2", "1", "chain", {sc.OI_SPAN_KIND: "CHAIN"}),
             span("3", "1", "llm", {sc.OI_SPAN_KIND: "LLM", sc.OI_LLM_MODEL_NAME: "m"}),
             span("4", "1", "custom", {"my.key": 1}),
             span("5", "1", "ours", {sc.SEGMENT: sc.Segment.TOOL.value})]
    told: list[tuple[str, object]] = []
    done = normalise(spans, lambda s, role: told.append((s.span_id, role)))
    # in the order read, each once; ours and the unknown with no role, the rest as classify says
    assert [sid for sid, _ in told] == [s.span_id for s in spans]
    assert [role for _, role in told] == [classify(s) if s.segment is None else None for s in spans]
    assert told[1][1].segment is None and told[2][1].segment == sc.Segment.GENERATION and told[3][1] is None
    assert len(done.spans) >= len(spans)
