"""Spans of another instrumentation's traces put back into the span table as ours (columnar/mapped.py):
the values the figures read come back as the per-span code held them, a span keeps only the
attributes the queries read, and a task whose reading said a figure is missing that it has is
named (the queries would count it otherwise)."""

from __future__ import annotations

import pytest

from agenttrace import semconv as sc
from agenttrace.columnar.assemble import typed as read_back
from agenttrace.columnar.mapped import SYNTHETIC, rows, typed, unsaid
from agenttrace.traces.span_records import EventRecord, SpanRecord


@pytest.mark.parametrize("value", ["text", "", 7, -3, 0.25, 1e-300, True, False, ["steps", "retries"], [1, 2.5]])
def test_a_value_comes_back_as_the_per_span_code_held_it(value):
    back = read_back(typed("agenttrace.inferred", value))
    assert back == value and type(back) is type(value)


def _agent(**attrs) -> SpanRecord:
    return SpanRecord("ab" * 16, "cd" * 8, None, "invoke_agent", "INTERNAL", 0, 10,
                      {sc.SEGMENT: sc.Segment.AGENT.value, **attrs})


def test_a_task_whose_reading_said_a_figure_it_has_is_missing_is_named():
    said = ("steps: step 3 shares the span 'turn' with an earlier step: steps from 3 on not inferred",)
    assert unsaid([_agent(**{sc.NOT_INFERRED: said, sc.STEPS: 2})]) is not None
    # no step at all, or no outcome where none was recorded: the queries count it the same way
    assert unsaid([_agent(**{sc.NOT_INFERRED: ("steps: no model call or tool execution",), sc.STEPS: 0})]) is None
    assert unsaid([_agent(**{sc.NOT_INFERRED: ("outcome: the last step ended in a tool call",)})]) is None
    assert unsaid([_agent(**{sc.NOT_INFERRED: ("outcome: none",), sc.TASK_OUTCOME: "completed"})]) is not None


def test_a_span_the_reading_made_takes_an_order_above_every_inputs():
    import json

    agent = _agent()
    step = SpanRecord(agent.trace_id, f"{agent.span_id}.step1", agent.span_id, "agent_step 1", "INTERNAL", 1, 9,
                      {sc.SEGMENT: sc.Segment.STEP.value},
                      [EventRecord(sc.EVENT_SPECULATE_ROUND, 0, {sc.ROUND_DRAFTED: 4, sc.ROUND_ACCEPTED: 2})])
    lines, after = rows([agent, step], {(agent.trace_id, agent.span_id): 12}, SYNTHETIC)
    first, second = (json.loads(x) for x in lines)
    assert first["i"] == 12 and second["i"] == SYNTHETIC and after == SYNTHETIC + 1
    assert second["parent_id"] == agent.span_id and second["segment"] == sc.Segment.STEP.value
    assert second["rounds"] == [[4, 2, 0.0, 0.0, 0, 0]] and first["kind"] == "OTHER"


def test_a_span_put_back_keeps_the_attributes_the_queries_read_and_no_content():
    import json

    from agenttrace.columnar.summary import read_keys
    from agenttrace.report.spec import GENERATION_KEYS

    keys = read_keys()
    # every key the generation values narrow the map to, and ones the step and task values read
    assert set(GENERATION_KEYS) <= keys
    assert {sc.STEP_OUTCOME, sc.TASK_OUTCOME, sc.ATTEMPT_OUTCOME, sc.VALIDATION_OK, sc.GEN_AI_USAGE_OUTPUT_TOKENS} <= keys
    content = {sc.OI_INPUT_VALUE: "x" * 5000, "llm.input_messages.0.message.content": "hello",
               sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"city": "Paris"}'}
    gen = SpanRecord("ab" * 16, "ef" * 8, "cd" * 8, "chat", "CLIENT", 1, 9,
                     {sc.SEGMENT: sc.Segment.GENERATION.value, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 12,
                      sc.GEN_AI_REQUEST_MODEL: "m", **content})
    (line,), _ = rows([gen], {}, SYNTHETIC)
    row = json.loads(line)
    assert row["attrs"] == {sc.GEN_AI_USAGE_OUTPUT_TOKENS: "i12", sc.GEN_AI_REQUEST_MODEL: "sm"}
    assert row["segment"] == sc.Segment.GENERATION.value
