"""The instrumentation API: a wrapped agent writes the span tree our own loop writes, and gets
the same report; decorators, async, errors, cancellation, and telemetry that never breaks it."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.trace import SpanKind, StatusCode

import agenttrace as at
from agenttrace import Agent, AgentConfig, FakeClock, Task, Tool, ToolError
from agenttrace import semconv as sc
from agenttrace.errors import ParseError
from agenttrace.report import report_from_files
from agenttrace.runtime.parse import FinalAnswer, parse_decision
from agenttrace.testing import (
    ScriptedModel,
    ScriptedReply,
    capture_telemetry,
    spans_by_name,
)

CALL = '{"tool": "weather", "arguments": {"city": "Paris"}}'
BAD_ARGS = '{"tool": "weather", "arguments": {"town": "Paris"}}'
ANSWER = '{"answer": "Light rain."}'
REPLIES = [ScriptedReply("no json here", rounds=((3, 1, 0.01, 0.02),)), BAD_ARGS, CALL, ANSWER]


def weather_tool(clock: FakeClock) -> Tool:
    def lookup(city: str) -> dict:
        clock.advance_s(0.05)
        if city == "Atlantis":
            raise ToolError("no weather data")
        return {"city": city, "condition": "light rain"}

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
    return Tool("weather", "Current weather in a city.", schema, lookup)


def wrapped_agent(model, tool: Tool, telemetry, prompt: str, task_id: str):
    """A plain loop with its own parsing and dispatch, traced with the public API."""
    model = at.traced_model(model, telemetry=telemetry)
    messages = [at.Message("user", prompt)]
    with at.agent_span("test-agent", task_id=task_id, telemetry=telemetry) as run:
        for _ in range(4):
            with at.step_span() as step:
                for _attempt in range(3):
                    reply = model.chat(messages, at.GenerationParams(max_tokens=96)).text
                    with at.parse_span() as p:
                        try:
                            decision = parse_decision(reply, [tool.name])
                        except ParseError as exc:
                            p.failed(exc.error_type)
                            step.retry()
                            continue
                        p.final_answer() if isinstance(decision, FinalAnswer) else p.tool_call(decision.tool)
                    if isinstance(decision, FinalAnswer):
                        return run, decision.text
                    check = at.validate_tool_call(decision, schema=tool)
                    if not check.ok:
                        step.retry()
                        continue
                    with at.tool_span(tool.name):
                        result = tool.function(**check.arguments)
                    messages.append(at.Message("user", f"Tool result: {result}"))
                    break
    return run, None


def test_a_wrapped_loop_gets_the_same_report_as_our_own_loop(tmp_path):
    own_clock, wrap_clock = FakeClock(), FakeClock()
    own_tel, _ = capture_telemetry(own_clock, trace_file=str(tmp_path / "own.jsonl"))
    wrap_tel, memory = capture_telemetry(wrap_clock, trace_file=str(tmp_path / "wrapped.jsonl"))

    cfg = AgentConfig(name="test-agent", max_steps=4, max_attempts=3)
    result = Agent(ScriptedModel(REPLIES, own_clock, method="prompt_lookup", num_speculative_tokens=3), [weather_tool(own_clock)], telemetry=own_tel, config=cfg).run(
        Task(id="t1", prompt="Weather in Paris?")
    )
    run, answer = wrapped_agent(ScriptedModel(REPLIES, wrap_clock, method="prompt_lookup", num_speculative_tokens=3), weather_tool(wrap_clock), wrap_tel, "Weather in Paris?", "t1")
    own_tel.shutdown(), wrap_tel.shutdown()
    assert result.answer == answer == "Light rain."

    own, wrapped = (report_from_files([str(tmp_path / f)]) for f in ("own.jsonl", "wrapped.jsonl"))
    (o,), (w,) = own.tasks, wrapped.tasks
    assert w.outcome == o.outcome == "completed"
    assert (w.decisions_valid, w.decisions_invalid) == (o.decisions_valid, o.decisions_invalid) == (2, 2)
    assert w.ttvtc_s == pytest.approx(o.ttvtc_s) and w.ttvtc_s is not None
    assert w.decision_throughput == pytest.approx(o.decision_throughput)
    assert w.segments.model_dump() == pytest.approx(o.segments.model_dump())
    assert w.retry_s == pytest.approx(o.retry_s) and w.retry_s > 0
    assert [(s.outcome, s.attempts, s.ttvtc_s) for s in w.steps] == [(s.outcome, s.attempts, s.ttvtc_s) for s in o.steps]
    assert (w.attempts, w.valid_attempts) == (o.attempts, o.valid_attempts) == (4, 2)
    assert w.speculation.draft_tokens == o.speculation.draft_tokens == 3
    assert wrapped.run.model_dump() == own.run.model_dump()  # same fake-clock times, same sums

    # the same tree: names, parents and outcomes
    spans = memory.get_finished_spans()
    named = spans_by_name(spans)
    (agent,) = named["invoke_agent test-agent"]
    assert agent.attributes[sc.GEN_AI_REQUEST_MODEL] == "scripted-model"
    assert agent.attributes[sc.GEN_AI_PROVIDER_NAME] == "scripted"
    step1 = next(s for s in named["agent_step 1"])
    attempts = sorted((s for s in spans if s.parent and s.parent.span_id == step1.context.span_id), key=lambda s: s.start_time)
    assert [a.attributes[sc.ATTEMPT_OUTCOME] for a in attempts] == ["parse_error", "validation_error", "ok"]
    assert attempts[0].status.status_code is StatusCode.ERROR and attempts[0].attributes[sc.ERROR_TYPE] == "parse_error"
    assert all(s.attributes[sc.SEGMENT] for s in spans)
    assert run.steps == 2


def test_decorators_work_on_sync_and_async_functions_and_count_steps():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)

    @at.tool_span("lookup", telemetry=tel)
    def lookup(x: int) -> int:
        clock.advance_s(0.1)
        return x + 1

    @at.agent_span("sync-agent", task_id="s", telemetry=tel)
    def sync_agent() -> int:
        with at.step_span():
            assert at.validate_tool_call("lookup", {"x": 1}, schema={"type": "object"}).ok
            return lookup(1)

    @at.agent_span("async-agent", task_id="a", telemetry=tel)
    async def async_agent() -> str:
        async with at.step_span():
            await asyncio.sleep(0)
            at.final_answer("done")
        return "done"

    assert sync_agent() == 2 and sync_agent() == 2
    assert asyncio.run(async_agent()) == "done"
    named = spans_by_name(memory.get_finished_spans())
    assert len(named["invoke_agent sync-agent"]) == 2  # one run per call
    assert [s.attributes[sc.STEP_INDEX] for s in named["agent_step 1"]] == [1, 1, 1]
    (tool,) = named["execute_tool lookup"][:1]
    assert tool.end_time - tool.start_time == 100_000_000
    (a,) = named["invoke_agent async-agent"]
    assert a.attributes[sc.TASK_OUTCOME] == "completed" and a.attributes[sc.DECISIONS_VALID] == 1
    assert named["invoke_agent sync-agent"][0].attributes[sc.TASK_OUTCOME] == "budget_exhausted"


def test_errors_and_cancellation_mark_spans_and_pass_through():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)
    with pytest.raises(KeyError):
        with at.agent_span("failing", telemetry=tel):
            with at.step_span():
                with at.tool_span("broken"):
                    raise KeyError("missing")

    async def cancelled():
        async with at.agent_span("cancelled", telemetry=tel):
            async with at.step_span():
                with at.generation_span("m", provider="p", remote=True):
                    await asyncio.sleep(10)

    async def main():
        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    named = spans_by_name(memory.get_finished_spans())
    tool = named["execute_tool broken"][0]
    assert tool.status.status_code is StatusCode.ERROR and tool.attributes[sc.ERROR_TYPE] == "KeyError"
    assert named["attempt 1"][0].attributes[sc.ATTEMPT_OUTCOME] == "tool_error"
    assert named["agent_step 1"][0].attributes[sc.STEP_OUTCOME] == "error"
    assert named["invoke_agent failing"][0].attributes[sc.TASK_OUTCOME] == "failed"
    gen = named["chat m"][0]
    assert gen.kind is SpanKind.CLIENT and gen.attributes[sc.ERROR_TYPE] == "cancelled"
    assert named["attempt 1"][1].attributes[sc.ATTEMPT_OUTCOME] == "cancelled"
    assert named["agent_step 1"][1].attributes[sc.STEP_OUTCOME] == "cancelled"
    assert named["invoke_agent cancelled"][0].attributes[sc.TASK_OUTCOME] == "cancelled"


def test_explicit_attempts_delegation_memory_and_compaction():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)
    with at.agent_span("lead", telemetry=tel) as run:
        with at.memory_span("search", telemetry=tel) as m:
            m.items(3)
        with at.step_span():
            with at.attempt_span() as a1:
                a1.set_outcome("timeout")
            with at.attempt_span():
                with at.delegation_span("helper", awaited=False) as sub:
                    with at.step_span():
                        at.final_answer("sub answer")
                at.validate_tool_call("x", {}, schema={"type": "object"})
        with at.compaction_span(tokens_before=900) as c:
            c.tokens_after(300)
        run.set_outcome("completed")
    spans = memory.get_finished_spans()
    named = spans_by_name(spans)
    by_id = {s.context.span_id: s for s in spans}
    (lead,) = named["invoke_agent lead"]
    assert named["search_memory"][0].parent.span_id == lead.context.span_id
    assert named["search_memory"][0].attributes[sc.MEMORY_ITEMS] == 3
    assert named["compact_context"][0].attributes[sc.COMPACTION_TOKENS_AFTER] == 300
    lead_steps = [s for s in named["agent_step 1"] if s.parent.span_id == lead.context.span_id]
    assert lead_steps[0].attributes[sc.STEP_ATTEMPTS] == 2
    assert [a.attributes[sc.ATTEMPT_OUTCOME] for a in named["attempt 2"]] == ["ok"]
    # not awaited: a PRODUCER hand-off in the delegating attempt, the run its CONSUMER child,
    # linked to the attempt it was delegated from
    handoff, helper = sorted(named["invoke_agent helper"], key=lambda s: s.kind.value)
    assert handoff.kind is SpanKind.PRODUCER and helper.kind is SpanKind.CONSUMER
    assert {handoff.attributes[sc.SEGMENT], helper.attributes[sc.SEGMENT]} == {"delegation"}
    assert by_id[handoff.parent.span_id].name == "attempt 2"
    assert helper.parent.span_id == handoff.context.span_id
    assert [link.context.span_id for link in helper.links] == [handoff.parent.span_id]
    assert handoff.end_time <= helper.start_time + 1  # the hand-off ends as the run starts
    assert helper.attributes[sc.TASK_OUTCOME] == "completed" and sub.decisions_valid == 1
    assert lead.attributes[sc.DECISIONS_VALID] == 1  # the sub-agent's decisions are its own


def test_telemetry_failures_never_reach_the_agent(monkeypatch):
    monkeypatch.setenv("AGENTTRACE_STRICT_TELEMETRY", "0")
    clock = FakeClock()
    tel, _ = capture_telemetry(clock)

    def broken(*args, **kwargs):
        raise RuntimeError("telemetry bug")

    monkeypatch.setattr(tel.tracer, "start_span", broken)
    with at.agent_span("a", telemetry=tel) as run:  # opening fails: the block runs untraced
        with at.step_span(telemetry=tel):
            result = at.validate_tool_call("t", {"a": 1}, schema={"type": "object"}, telemetry=tel)
    assert run is None and result.ok
    assert tel.failures.total >= 3


def _tree_ok(spans, agent):
    """Every span of `agent`'s trace is under it; its steps and tools are its own."""
    mine = [s for s in spans if s.context.trace_id == agent.context.trace_id]
    by_id = {s.context.span_id: s for s in mine}
    for s in mine:
        if s is not agent:
            assert s.parent is not None and s.parent.span_id in by_id, s.name
    tools = [s for s in mine if s.name.startswith("execute_tool")]
    task = agent.attributes[sc.TASK_ID]
    assert {s.attributes[sc.GEN_AI_TOOL_CALL_ID] for s in tools} == {f"{task}-{i}" for i in range(3)}
    assert agent.attributes[sc.STEPS] == 2 and agent.attributes[sc.DECISIONS_VALID] == 4
    return len(mine)


def _agent_body(n: int, parallel):
    with at.agent_span("many", task_id=f"task{n}"):
        with at.step_span():
            calls = [parallel(i) for i in range(3)]
            for c in calls:
                c()
        with at.step_span():
            at.final_answer()


def _tool_call(n: int, i: int):
    assert at.validate_tool_call("t", {"i": i}, schema={"type": "object"}).ok
    with at.tool_span("t", call_id=f"task{n}-{i}"):
        pass


def test_32_concurrent_agents_on_threads_make_32_separate_trees():
    tel, memory = capture_telemetry(FakeClock())
    at.configure(telemetry=tel)
    try:
        with at.PropagatingExecutor(max_workers=8) as agents, at.PropagatingExecutor(max_workers=4) as tools:

            def agent(n):
                def parallel(i):  # a step's tool calls run on another pool, in the step's context
                    return tools.submit(_tool_call, n, i).result

                _agent_body(n, parallel)

            list(agents.map(agent, range(32)))
    finally:
        at.shutdown()
    spans = memory.get_finished_spans()
    agents = spans_by_name(spans)["invoke_agent many"]
    assert len(agents) == 32 and len({a.context.trace_id for a in agents}) == 32
    assert sum(_tree_ok(spans, a) for a in agents) == len(spans)


def test_32_concurrent_agents_as_asyncio_tasks_make_32_separate_trees():
    tel, memory = capture_telemetry(FakeClock())

    async def agent(n):
        async with at.agent_span("many", task_id=f"task{n}", telemetry=tel):
            async with at.step_span():

                async def call(i):
                    await asyncio.sleep(0)
                    await asyncio.to_thread(_tool_call, n, i)

                await asyncio.gather(*(call(i) for i in range(3)))
            async with at.step_span():
                await asyncio.sleep(0)
                at.final_answer()

    async def main():
        await asyncio.gather(*(agent(n) for n in range(32)))

    asyncio.run(main())
    spans = memory.get_finished_spans()
    agents = spans_by_name(spans)["invoke_agent many"]
    assert len(agents) == 32 and len({a.context.trace_id for a in agents}) == 32
    assert sum(_tree_ok(spans, a) for a in agents) == len(spans)


def test_without_propagation_a_plain_thread_loses_the_step_and_propagate_restores_it():
    import threading

    tel, memory = capture_telemetry(FakeClock())
    with at.agent_span("a", telemetry=tel):
        with at.step_span():
            bare = threading.Thread(target=_tool_call_named, args=(tel, "bare"))
            bare.start(), bare.join()
            carried = threading.Thread(target=at.propagate(_tool_call_named), args=(tel, "carried"))
            carried.start(), carried.join()
    named = spans_by_name(memory.get_finished_spans())
    assert named["execute_tool bare"][0].parent is None  # a new trace: context did not follow
    assert named["execute_tool carried"][0].parent.span_id == named["attempt 1"][0].context.span_id


def _tool_call_named(tel, name):
    with at.tool_span(name, telemetry=tel):
        pass


# -- loops whose retry is their next turn (turn_span), and the README's pattern -----------------
def _turn_loop(tel, clock, replies, *, turn=at.turn_span, max_turns=4):
    """A plain loop: each turn asks the model, validates its call and runs the tool; a failure
    goes back to the model as the next turn's input, as agents written by hand do."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
    replies = list(replies)
    with at.agent_span("loop", task_id="t", telemetry=tel):
        for _ in range(max_turns):
            if not replies:
                return
            with turn():
                with at.generation_span("m", provider="p", telemetry=tel):
                    clock.advance_s(0.05)
                    reply = replies.pop(0)
                if reply is None:
                    at.final_answer()
                    return
                if at.validate_tool_call("weather", reply, schema=schema).ok:
                    with at.tool_span("weather"):
                        clock.advance_s(0.01)


def test_turn_span_makes_a_failed_turn_and_its_retry_one_step_with_two_attempts(tmp_path):
    clock = FakeClock()
    tel, memory = capture_telemetry(clock, trace_file=str(tmp_path / "t.jsonl"))
    _turn_loop(tel, clock, [{"town": "Paris"}, {"city": "Paris"}, None])
    tel.shutdown()
    (task,) = report_from_files([str(tmp_path / "t.jsonl")]).tasks
    assert [(s.outcome, s.attempts) for s in task.steps] == [("tool_call", 2), ("final_answer", 1)]
    assert task.steps[0].retry_s == pytest.approx(0.05)  # the failed turn's model call
    assert (task.attempts, task.valid_attempts, task.outcome) == (3, 2, "completed")
    assert task.ttvtc_s == pytest.approx(0.10)
    named = spans_by_name(memory.get_finished_spans())
    assert [a.attributes[sc.ATTEMPT_OUTCOME] for a in sorted(named["attempt 1"] + named["attempt 2"], key=lambda s: s.start_time)] \
        == ["validation_error", "ok", "ok"]
    (agent,) = named["invoke_agent loop"]
    assert agent.attributes[sc.STEPS] == 2


def test_a_run_that_ends_on_a_failed_turn_closes_its_step():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)
    _turn_loop(tel, clock, [{"town": "Paris"}, {"town": "Rome"}])
    spans = memory.get_finished_spans()
    (step,) = spans_by_name(spans)["agent_step 1"]
    assert (step.attributes[sc.STEP_OUTCOME], step.attributes[sc.STEP_ATTEMPTS]) == ("invalid", 2)
    (agent,) = spans_by_name(spans)["invoke_agent loop"]
    assert agent.attributes[sc.TASK_OUTCOME] == "failed" and step.end_time <= agent.end_time


def test_the_readme_step_per_turn_pattern_counts_validated_calls_as_valid(tmp_path):
    # Each turn a step_span, no parse span: the attempt whose call validated is a valid one.
    clock = FakeClock()
    tel, _ = capture_telemetry(clock, trace_file=str(tmp_path / "t.jsonl"))
    _turn_loop(tel, clock, [{"town": "Paris"}, {"city": "Paris"}, None], turn=at.step_span)
    tel.shutdown()
    (task,) = report_from_files([str(tmp_path / "t.jsonl")]).tasks
    assert [(s.outcome, s.attempts) for s in task.steps] == [("invalid", 1), ("tool_call", 1), ("final_answer", 1)]
    assert (task.attempts, task.valid_attempts) == (3, 2)


def test_generation_span_without_model_or_provider_is_named_by_the_response():
    tel, memory = capture_telemetry(FakeClock())
    with at.agent_span("a", telemetry=tel):
        with at.step_span():
            with at.generation_span(telemetry=tel) as g:
                g.usage(12, 3)
                g.response(model="gpt-x", response_id="r1")
    named = spans_by_name(memory.get_finished_spans())
    (gen,) = named["chat gpt-x"]
    assert sc.GEN_AI_PROVIDER_NAME not in gen.attributes and sc.GEN_AI_REQUEST_MODEL not in gen.attributes
    assert (gen.attributes[sc.GEN_AI_RESPONSE_MODEL], gen.attributes[sc.GEN_AI_RESPONSE_ID]) == ("gpt-x", "r1")
    (agent,) = named["invoke_agent a"]
    assert agent.attributes[sc.GEN_AI_REQUEST_MODEL] == "gpt-x"
    assert (agent.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS], agent.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS]) == (12, 3)


def test_agent_and_tool_spans_carry_the_genai_attributes():
    tel, memory = capture_telemetry(FakeClock())
    with at.agent_span("a", task_id="t9", agent_id="agent-7", description="answers", provider="openai", telemetry=tel):
        with at.tool_span("weather", description="Current weather."):
            pass
        with at.tool_span("weather", call_id="call_1"):
            pass
    named = spans_by_name(memory.get_finished_spans())
    (agent,) = named["invoke_agent a"]
    a = agent.attributes
    assert (a[sc.GEN_AI_CONVERSATION_ID], a[sc.GEN_AI_AGENT_ID], a[sc.GEN_AI_AGENT_DESCRIPTION]) == ("t9", "agent-7", "answers")
    assert a[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert sc.GEN_AI_USAGE_INPUT_TOKENS not in a  # no generation, no usage to sum
    first, second = sorted(named["execute_tool weather"], key=lambda s: s.start_time)
    assert sc.GEN_AI_TOOL_CALL_ID not in first.attributes  # none invented
    assert first.attributes[sc.GEN_AI_TOOL_DESCRIPTION] == "Current weather."
    assert second.attributes[sc.GEN_AI_TOOL_CALL_ID] == "call_1"
