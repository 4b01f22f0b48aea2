"""The agent loop and its spans, on a scripted model and a fake clock."""

from __future__ import annotations

import time

import pytest
from opentelemetry.trace import StatusCode

from agenttrace import Agent, AgentConfig, CancelToken, FakeClock, Task, Tool, ToolError
from agenttrace import semconv as sc
from agenttrace.testing import ScriptedModel, ScriptedReply, capture_telemetry, spans_by_name

CALL = '{"tool": "weather", "arguments": {"city": "Paris"}}'
ANSWER = '{"answer": "Light rain, 12.5 C."}'


def weather_tool(clock: FakeClock, seconds: float = 0.05) -> Tool:
    def lookup(city: str) -> dict:
        clock.advance_s(seconds)
        if city == "Atlantis":
            raise ToolError("no weather data for 'Atlantis'")
        return {"city": city, "condition": "light rain"}

    return Tool(
        "weather",
        "Current weather in a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False},
        lookup,
    )


def run(replies, *, config=AgentConfig(name="test-agent"), task=None, clock=None, detail="default", tool=None):
    clock = clock or FakeClock()
    tel, memory = capture_telemetry(clock, detail=detail)
    model = ScriptedModel(replies, clock)
    agent = Agent(model, [tool or weather_tool(clock)], telemetry=tel, config=config)
    result = agent.run(task or Task(id="t1", prompt="Weather in Paris?", expected_call={"tool": "weather", "arguments": {"city": "paris"}}))
    return result, memory.get_finished_spans(), model, clock


def test_span_tree_and_attributes_of_one_task():
    t0 = FakeClock().now_ns()
    result, spans, model, clock = run(["no json here", CALL, ANSWER])
    assert result.outcome is sc.TaskOutcome.COMPLETED
    assert result.answer == "Light rain, 12.5 C."
    assert (result.decisions_valid, result.decisions_invalid) == (2, 1)

    by_id = {s.context.span_id: s for s in spans}
    named = spans_by_name(spans)

    def children(span):
        return sorted((s for s in spans if s.parent and s.parent.span_id == span.context.span_id), key=lambda s: s.start_time)

    (agent,) = named["invoke_agent test-agent"]
    assert agent.parent is None
    assert dict(agent.attributes) | {} == {
        sc.SEGMENT: "agent",
        sc.GEN_AI_OPERATION_NAME: "invoke_agent",
        sc.GEN_AI_AGENT_NAME: "test-agent",
        sc.GEN_AI_PROVIDER_NAME: "scripted",
        sc.GEN_AI_REQUEST_MODEL: "scripted-model",
        sc.TASK_ID: "t1",
        sc.GEN_AI_CONVERSATION_ID: "t1",  # the task is the conversation
        sc.TASK_OUTCOME: "completed",
        sc.STEPS: 2,
        sc.DECISIONS_VALID: 2,
        sc.DECISIONS_INVALID: 1,
        sc.GEN_AI_USAGE_INPUT_TOKENS: 300,  # summed over the task's three generations
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 23,
    }
    assert agent.status.status_code is StatusCode.UNSET

    step1, step2 = children(agent)
    assert [step1.name, step2.name] == ["agent_step 1", "agent_step 2"]
    assert step1.attributes[sc.STEP_OUTCOME] == "tool_call" and step1.attributes[sc.STEP_ATTEMPTS] == 2
    assert step2.attributes[sc.STEP_OUTCOME] == "final_answer" and step2.attributes[sc.STEP_ATTEMPTS] == 1

    a1, a2 = children(step1)
    assert (a1.name, a1.attributes[sc.ATTEMPT_INDEX], a1.attributes[sc.ATTEMPT_OUTCOME]) == ("attempt 1", 1, "parse_error")
    assert a1.status.status_code is StatusCode.ERROR and a1.attributes[sc.ERROR_TYPE] == "parse_error"
    assert [c.name for c in children(a1)] == ["chat scripted-model", "parse_tool_call"]
    parse1 = children(a1)[1]
    assert parse1.attributes[sc.PARSE_OK] is False and parse1.attributes[sc.ERROR_TYPE] == "no_json"

    assert a2.attributes[sc.ATTEMPT_OUTCOME] == "ok"
    gen, parse, validate, tool = children(a2)
    assert gen.name == "chat scripted-model" and gen.attributes[sc.SEGMENT] == "generation"
    assert gen.attributes[sc.GEN_AI_OPERATION_NAME] == "chat"
    assert gen.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert gen.attributes[sc.SPEC_METHOD] == "none"
    assert gen.attributes[sc.GEN_AI_RESPONSE_MODEL] == "scripted-model"
    assert gen.attributes[sc.GEN_AI_RESPONSE_ID] == f"gen-{gen.context.span_id:016x}"
    (prefill,) = children(gen)
    assert prefill.name == "prefill" and prefill.attributes[sc.TOKENS] == 100
    assert parse.attributes[sc.PARSE_OK] is True and parse.attributes[sc.PARSE_RESULT] == "tool_call"
    assert validate.name == "validate_arguments weather"
    assert validate.attributes[sc.VALIDATION_OK] is True and validate.attributes[sc.VALIDATION_ERRORS] == 0
    assert validate.attributes[sc.VALIDATION_VALIDATOR] == "jsonschema"
    assert validate.attributes[sc.DECISION_CORRECT] is True  # "Paris" matches expected "paris"
    assert tool.name == "execute_tool weather"
    assert tool.attributes[sc.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool.attributes[sc.GEN_AI_TOOL_TYPE] == "function"
    assert sc.GEN_AI_TOOL_CALL_ID not in tool.attributes  # the model's JSON gave no call id: none invented
    assert tool.attributes[sc.GEN_AI_TOOL_DESCRIPTION] == "Current weather in a city."

    # Exact times from the fake clock: 0.3 s per generation (0.1 prefill + 0.2 decode), 0.05 s tool.
    assert agent.start_time == t0
    assert a1.end_time - a1.start_time == 300_000_000
    assert (gen.start_time, gen.end_time) == (t0 + 300_000_000, t0 + 600_000_000)
    assert (prefill.start_time, prefill.end_time) == (t0 + 300_000_000, t0 + 400_000_000)
    assert tool.end_time - tool.start_time == 50_000_000
    assert agent.end_time == t0 + 950_000_000
    assert gen.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(0.1)

    # Every span carries its segment; the model saw its mistake on the retry.
    assert all(sc.SEGMENT in s.attributes for s in spans)
    retry_prompt = model.calls[1]
    assert retry_prompt[-2].content == "no json here" and "no JSON object" in retry_prompt[-1].content
    # History holds only accepted decisions: step 2 does not see the failed attempt.
    assert "no json here" not in [m.content for m in model.calls[2]]
    assert len(by_id) == len(spans)


def test_speculation_rounds_are_events_by_default_and_spans_when_fine():
    reply = ScriptedReply(ANSWER, prefill_s=0.1, decode_s=0.05, rounds=((3, 2, 0.001, 0.02), (3, 3, 0.001, 0.02)))
    _, spans, _, _ = run([reply], config=AgentConfig(name="a"))
    (gen,) = spans_by_name(spans)["chat scripted-model"]
    events = [e for e in gen.events if e.name == "speculate.round"]
    assert [(e.attributes["drafted"], e.attributes["accepted"]) for e in events] == [(3, 2), (3, 3)]
    assert events[0].attributes["draft_s"] == pytest.approx(0.001)
    assert "speculate.draft" not in spans_by_name(spans)

    model_spec = ScriptedModel([reply], FakeClock(), method="prompt_lookup", num_speculative_tokens=3)
    clock = model_spec.clock
    tel, memory = capture_telemetry(clock, detail="fine")
    Agent(model_spec, [weather_tool(clock)], telemetry=tel).run("hi")
    named = spans_by_name(memory.get_finished_spans())
    (gen,) = named["chat scripted-model"]
    a = gen.attributes
    assert (a[sc.SPEC_METHOD], a[sc.SPEC_NUM_SPECULATIVE_TOKENS], a[sc.SPEC_ROUNDS]) == ("prompt_lookup", 3, 2)
    assert (a[sc.SPEC_DRAFT_TOKENS], a[sc.SPEC_ACCEPTED_TOKENS]) == (6, 5)
    assert a[sc.SPEC_ACCEPTANCE_RATE] == pytest.approx(5 / 6)
    assert a[sc.SPEC_MEAN_ACCEPTANCE_LENGTH] == pytest.approx(1 + 5 / 2)
    assert a[sc.SPEC_ACCEPTANCE_PER_POSITION] == (2, 2, 1)
    assert a[sc.SPEC_DRAFT_S] == pytest.approx(0.002) and a[sc.SPEC_VERIFY_S] == pytest.approx(0.04)
    assert a[sc.SPEC_FALLBACK] is False
    assert [s.attributes[sc.SPEC_DRAFTED] for s in named["speculate.draft"]] == [3, 3]
    assert [s.attributes[sc.SPEC_ACCEPTED] for s in named["speculate.verify"]] == [2, 3]
    assert all(s.parent.span_id == gen.context.span_id for s in named["speculate.verify"])


def test_validation_failure_then_retry_succeeds():
    bad = '{"tool": "weather", "arguments": {"city": 42, "country": "FR"}}'
    result, spans, model, _ = run([bad, CALL, ANSWER])
    assert result.outcome is sc.TaskOutcome.COMPLETED
    (first_validation, _) = spans_by_name(spans)["validate_arguments weather"]
    assert first_validation.attributes[sc.VALIDATION_OK] is False
    assert first_validation.attributes[sc.VALIDATION_ERRORS] == 2
    assert first_validation.attributes[sc.ERROR_TYPE] == "validation_error"
    feedback = model.calls[1][-1].content
    assert "arguments.city: 42 is not of type 'string'" in feedback and "'country' was unexpected" in feedback


def test_tool_error_is_shown_to_the_model_and_retried():
    result, spans, model, _ = run(['{"tool": "weather", "arguments": {"city": "Atlantis"}}', CALL, ANSWER])
    assert result.outcome is sc.TaskOutcome.COMPLETED
    attempts = [s for s in spans if s.name.startswith("attempt")]
    assert [a.attributes[sc.ATTEMPT_OUTCOME] for a in sorted(attempts, key=lambda s: s.start_time)] == ["tool_error", "ok", "ok"]
    (failed_tool, _) = spans_by_name(spans)["execute_tool weather"]
    assert failed_tool.status.status_code is StatusCode.ERROR and failed_tool.attributes[sc.ERROR_TYPE] == "tool_error"
    assert "no weather data for 'Atlantis'" in model.calls[1][-1].content
    # A tool failure after valid arguments is a valid decision, not an invalid one.
    assert (result.decisions_valid, result.decisions_invalid) == (3, 0)


def test_hanging_tool_times_out_and_the_run_goes_on():
    clock = FakeClock()

    def hang(city: str) -> str:
        time.sleep(5 if city == "Paris" else 0)
        return "sunny"

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = Tool("weather", "w", schema, hang, timeout_s=0.05)
    started = time.perf_counter()
    result, spans, _, _ = run(
        [CALL, '{"tool": "weather", "arguments": {"city": "Rome"}}', ANSWER], clock=clock, tool=tool
    )
    assert time.perf_counter() - started < 2
    assert result.outcome is sc.TaskOutcome.COMPLETED
    first_attempt = min((s for s in spans if s.name == "attempt 1"), key=lambda s: s.start_time)
    assert first_attempt.attributes[sc.ATTEMPT_OUTCOME] == "timeout"


def test_attempts_exhausted_fail_the_step_and_the_task():
    result, spans, _, _ = run(["nope", "still nope", "{broken"])
    assert result.outcome is sc.TaskOutcome.FAILED
    (step,) = spans_by_name(spans)["agent_step 1"]
    assert step.attributes[sc.STEP_OUTCOME] == "invalid" and step.status.status_code is StatusCode.ERROR
    (agent,) = spans_by_name(spans)["invoke_agent test-agent"]
    assert agent.attributes[sc.TASK_OUTCOME] == "failed" and agent.attributes[sc.DECISIONS_INVALID] == 3


def test_step_limit_exhausts_the_budget():
    result, spans, _, _ = run([CALL, CALL], config=AgentConfig(max_steps=2))
    assert result.outcome is sc.TaskOutcome.BUDGET_EXHAUSTED
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.attributes[sc.TASK_OUTCOME] == "budget_exhausted" and agent.attributes[sc.STEPS] == 2


def test_the_same_call_repeated_stops_the_task_as_a_loop(tmp_path):
    calls = []
    clock = FakeClock()
    tool = weather_tool(clock)
    counted = Tool(tool.name, tool.description, tool.parameters, lambda city: calls.append(city) or tool.function(city),
                   isolation="thread")
    other = '{"tool": "weather", "arguments": {"city": "Rome"}}'
    result, spans, model, _ = run([CALL, other, CALL, CALL], config=AgentConfig(loop_repeats=3, max_steps=6),
                                  tool=counted, clock=clock)
    assert result.outcome is sc.TaskOutcome.LOOP_DETECTED and len(result.steps) == 4
    assert calls == ["Paris", "Rome", "Paris"]  # the third identical call is not run again
    assert result.steps[-1].loop and result.steps[-1].result is None
    named = spans_by_name(spans)
    (agent,) = named["invoke_agent agent"]
    assert agent.attributes[sc.TASK_OUTCOME] == "loop_detected" and agent.attributes[sc.ERROR_TYPE] == "loop_detected"
    assert agent.attributes[sc.LOOP_TOOL] == "weather" and agent.attributes[sc.LOOP_REPEATS] == 3
    (step4,) = named["agent_step 4"]
    assert step4.attributes[sc.LOOP_DETECTED] is True and step4.attributes[sc.STEP_OUTCOME] == "tool_call"
    assert "execute_tool weather" not in {s.name for s in spans if s.start_time >= step4.start_time}
    # the report, reading the trace file, counts it
    from agenttrace import report_from_files

    path = tmp_path / "loop.jsonl"
    tel, _ = capture_telemetry(FakeClock(), trace_file=str(path))
    agent2 = Agent(ScriptedModel([CALL, CALL, CALL], tel.clock), [weather_tool(tel.clock)], telemetry=tel,
                   config=AgentConfig(loop_repeats=3))
    assert agent2.run("Weather in Paris?").outcome is sc.TaskOutcome.LOOP_DETECTED
    tel.shutdown()
    report = report_from_files([str(path)])
    assert report.run.loops_detected == 1 and report.tasks[0].outcome == "loop_detected"


def test_loop_detection_can_be_turned_off():
    result, _, _, _ = run([CALL, CALL, CALL, ANSWER], config=AgentConfig(loop_repeats=None))
    assert result.outcome is sc.TaskOutcome.COMPLETED


def test_deadline_stops_between_attempts():
    slow = ScriptedReply("garbage", prefill_s=0.4, decode_s=0.4)
    result, _, model, _ = run([slow, slow, slow], config=AgentConfig(deadline_s=1.0))
    assert result.outcome is sc.TaskOutcome.BUDGET_EXHAUSTED
    assert len(model.calls) == 2  # the third attempt would start after the deadline


def test_cancellation_closes_spans_with_error_type_cancelled():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)
    cancel = CancelToken()
    cancel.cancel()
    agent = Agent(ScriptedModel([CALL], clock), [weather_tool(clock)], telemetry=tel)
    result = agent.run("Weather in Paris?", cancel=cancel)
    assert result.outcome is sc.TaskOutcome.CANCELLED
    spans = memory.get_finished_spans()
    assert all(s.end_time is not None for s in spans)
    (agent_span,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent_span.attributes[sc.ERROR_TYPE] == "cancelled"


def test_asyncio_cancellation_stops_the_task():
    import asyncio

    clock = FakeClock()
    tel, memory = capture_telemetry(clock)

    class SlowModel(ScriptedModel):
        def chat(self, messages, params, *, cancel=None):
            while not (cancel and cancel.cancelled):  # a long generation, checking between rounds
                time.sleep(0.01)
            return super().chat(messages, params, cancel=cancel)

    agent = Agent(SlowModel([CALL], clock), [weather_tool(clock)], telemetry=tel)

    async def main():
        task = asyncio.create_task(agent.arun("Weather in Paris?"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (attempt,) = [s for s in memory.get_finished_spans() if s.name == "attempt 1"]
    assert attempt.attributes[sc.ATTEMPT_OUTCOME] == "cancelled"


def test_a_huge_tool_result_reaches_the_model_capped_and_the_span_keeps_its_size():
    from agenttrace.runtime.execution import MAX_RESULT_CHARS

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = Tool("weather", "w", schema, lambda city: "x" * (MAX_RESULT_CHARS * 3))
    call = '{"tool": "weather", "arguments": {"city": "Paris"}}'
    result, spans, _, _ = run([call, '{"answer": "done"}'], tool=tool)
    (span,) = spans_by_name(spans)["execute_tool weather"]
    assert span.attributes[sc.TOOL_RESULT_SIZE] == MAX_RESULT_CHARS * 3  # a string renders as itself
    assert span.attributes[sc.TOOL_RESULT_TRUNCATED] is True
    assert len(result.steps[0].result) < MAX_RESULT_CHARS + 100
