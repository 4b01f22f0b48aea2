"""Delegation: a coordinator hands sub-tasks to sub-agents (awaited, and two at once joined);
the spans nest in one trace, the report's critical path and decision counts cover the tree, and
a sub-agent that raises, hangs or returns garbage becomes an observation for the coordinator."""

from __future__ import annotations

import threading
import time

from opentelemetry.trace import SpanKind, StatusCode

import agenttrace as at
from agenttrace import Agent, AgentConfig, FakeClock, Generation, GenerationCancelled, MonotonicClock, Task, Tool
from agenttrace import semconv as sc
from agenttrace.report import report_from_files
from agenttrace.runtime.delegation import SubAgent, delegation_tools
from agenttrace.testing import ScriptedModel, capture_telemetry, spans_by_name
from tests.runtime.test_agent import CALL, weather_tool

DELEGATE = '{"tool": "delegate", "arguments": {"agent": "weather_expert", "task": "Weather in Paris?"}}'
BOTH = '{"tool": "delegate_parallel", "arguments": {"weather_expert": "Paris?", "math_expert": "17*23?"}}'
ANSWER = '{"answer": "Light rain in Paris."}'


def coordinator(model, subs, tel, **config) -> Agent:
    return Agent(model, delegation_tools(subs), telemetry=tel, config=AgentConfig(name="coordinator", **config))


def test_an_awaited_sub_agent_runs_inside_the_delegating_tool_span_and_the_report_covers_the_tree(tmp_path):
    clock = FakeClock()
    path = tmp_path / "trace.jsonl"
    tel, exporter = capture_telemetry(clock, trace_file=str(path))
    expert = Agent(ScriptedModel([CALL, ANSWER], clock), [weather_tool(clock)], telemetry=tel,
                   config=AgentConfig(name="weather_expert"))
    coord_model = ScriptedModel([DELEGATE, ANSWER], clock)
    lead = coordinator(coord_model, [SubAgent("weather_expert", "knows the weather", agent=expert)], tel)
    result = lead.run(Task(id="t1", prompt="What is the weather in Paris? Ask the expert."))
    assert result.outcome is sc.TaskOutcome.COMPLETED
    assert "Light rain in Paris." in coord_model.calls[1][-1].content  # the sub-agent's answer, observed
    tel.shutdown()

    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    named = spans_by_name(spans)
    (run,) = named["invoke_agent weather_expert"]
    (tool,) = named["execute_tool delegate"]
    (lead_span,) = named["invoke_agent coordinator"]
    assert run.parent.span_id == tool.context.span_id and run.kind is SpanKind.INTERNAL
    assert run.attributes[sc.SEGMENT] == "delegation" and run.attributes[sc.TASK_OUTCOME] == "completed"
    assert run.attributes[sc.TASK_ID] == "t1/" + run.attributes[sc.TASK_ID].split("/", 1)[1]
    assert {s.context.trace_id for s in spans} == {lead_span.context.trace_id}  # one trace
    sub_steps = [s for s in spans if s.name.startswith("agent_step") and s.parent.span_id == run.context.span_id]
    assert len(sub_steps) == 2

    report = report_from_files([str(path)])
    (task,) = report.tasks  # the sub-agent is part of the task, not a task of its own
    assert task.sub_agents == 1 and report.run.sub_agents == 1
    assert task.decisions_valid == 4  # the coordinator's call and answer, and the sub-agent's
    # stages on the fake clock: each generation takes 0.3 s, the weather tool 0.05 s
    st = task.stages
    assert round(st.delegation_overhead, 6) == 0.6  # the coordinator's two generations
    assert round(st.generation, 6) == 0.6 and round(st.tool, 6) == 0.05
    assert abs(st.total() - task.wall_s) < 1e-9
    # the segment breakdown runs through the sub-agent: its tool's time is the task's tool time
    assert round(task.segments.tool, 6) >= 0.05 and round(task.steps[0].segments.tool, 6) >= 0.05


class Sleepy:
    """A model that takes `seconds` of real time per reply (checking its cancel token), for
    sub-agents that really run at once."""

    provider_name = "sleepy"
    model_name = "sleepy-model"

    def __init__(self, replies, seconds: float, *, fail: Exception | None = None) -> None:
        self.replies, self.seconds, self.fail = list(replies), seconds, fail
        self.clock = MonotonicClock()

    def chat(self, messages, params, *, cancel=None):
        start = self.clock.now_ns()
        until = time.monotonic() + self.seconds
        while time.monotonic() < until:
            if cancel is not None and cancel.cancelled:
                raise GenerationCancelled("cancelled mid-generation")
            time.sleep(0.01)
        if self.fail is not None:
            raise self.fail
        text = self.replies.pop(0)
        end = self.clock.now_ns()
        mid = (start + end) // 2
        return Generation(text=text, input_tokens=50, output_tokens=10, finish_reason="stop", start_ns=start,
                          end_ns=end, prefill_start_ns=start, prefill_end_ns=mid, first_token_ns=mid)


def _calc() -> Tool:
    def calc(expression: str) -> int:
        time.sleep(0.05)
        return 391

    return Tool("calculator", "Arithmetic.", {"type": "object", "properties": {"expression": {"type": "string"}},
                                              "required": ["expression"]}, calc, isolation="thread")


def _weather_real() -> Tool:
    def lookup(city: str) -> dict:
        time.sleep(0.05)
        return {"city": city, "condition": "light rain"}

    return Tool("weather", "Weather.", {"type": "object", "properties": {"city": {"type": "string"}},
                                        "required": ["city"]}, lookup, isolation="thread")


def test_two_sub_agents_at_once_overlap_and_the_report_follows_the_later_one(tmp_path):
    path = tmp_path / "trace.jsonl"
    tel, exporter = capture_telemetry(MonotonicClock(), trace_file=str(path))
    weather = Agent(Sleepy([CALL, ANSWER], 0.15), [_weather_real()], telemetry=tel, config=AgentConfig(name="weather_expert"))
    math = Agent(Sleepy(['{"tool": "calculator", "arguments": {"expression": "17*23"}}', '{"answer": "391"}'], 0.25),
                 [_calc()], telemetry=tel, config=AgentConfig(name="math_expert"))
    subs = [SubAgent("weather_expert", "weather", agent=weather), SubAgent("math_expert", "arithmetic", agent=math)]
    lead_model = Sleepy([BOTH, '{"answer": "Rain; 391."}'], 0.02)
    t0 = time.monotonic()
    result = coordinator(lead_model, subs, tel).run(Task(id="t2", prompt="Paris weather and 17*23, at once."))
    wall = time.monotonic() - t0
    assert result.outcome is sc.TaskOutcome.COMPLETED
    tel.shutdown()
    named = spans_by_name(exporter.get_finished_spans())
    (w,), (m,) = named["invoke_agent weather_expert"], named["invoke_agent math_expert"]
    (tool,) = named["execute_tool delegate_parallel"]
    assert w.parent.span_id == m.parent.span_id == tool.context.span_id
    assert w.start_time < m.end_time and m.start_time < w.end_time  # they ran at once
    serial = (w.end_time - w.start_time + m.end_time - m.start_time) / 1e9
    assert wall < serial + 0.2  # joined, not one after the other
    report = report_from_files([str(path)])
    (task,) = report.tasks
    assert task.sub_agents == 2 and task.overlap_s > 0.1  # the faster sub-agent ran off the path
    path_names = {p.name for p in task.critical_path}
    assert "execute_tool calculator" in path_names and "execute_tool weather" not in path_names
    assert task.decisions_valid == 6
    assert abs(task.stages.total() - task.wall_s) < 1e-6


def _fault_run(sub: SubAgent, tmp_path):
    clock = FakeClock()
    tel, exporter = capture_telemetry(clock)
    lead_model = ScriptedModel([DELEGATE.replace("weather_expert", sub.name), '{"answer": "I could not find out."}'],
                               clock)
    t0 = time.monotonic()
    result = coordinator(lead_model, [sub], tel).run(Task(id="t3", prompt="Ask the expert."))
    return result, lead_model, exporter.get_finished_spans(), time.monotonic() - t0


def test_a_sub_agent_that_raises_becomes_an_observation(tmp_path):
    broken = Agent(Sleepy([], 0.0, fail=RuntimeError("the GPU fell off")), [], config=AgentConfig(name="broken"))
    result, lead_model, spans, _ = _fault_run(SubAgent("broken", "always fails", agent=broken), tmp_path)
    assert result.outcome is sc.TaskOutcome.COMPLETED
    shown = lead_model.calls[1][-1].content
    assert "sub-agent broken failed: RuntimeError: the GPU fell off" in shown
    assert result.steps[0].attempts[0].outcome is sc.AttemptOutcome.TOOL_ERROR


def test_a_sub_agent_past_its_deadline_is_cancelled_and_reported_to_the_coordinator(tmp_path):
    tel, exporter = capture_telemetry(MonotonicClock())
    hanging = Agent(Sleepy([ANSWER], 30.0), [], telemetry=tel, config=AgentConfig(name="slow_expert"))
    lead_model = Sleepy([DELEGATE.replace("weather_expert", "slow_expert"), '{"answer": "No answer in time."}'], 0.0)
    lead = coordinator(lead_model, [SubAgent("slow_expert", "slow", agent=hanging, deadline_s=0.3)], tel)
    t0 = time.monotonic()
    result = lead.run(Task(id="t4", prompt="Ask the slow expert."))
    assert time.monotonic() - t0 < 5  # 0.3 s, then the cancel takes effect within a round
    assert result.outcome is sc.TaskOutcome.COMPLETED
    assert result.steps[0].attempts[0].error and "did not answer within 0.3 s and was cancelled" in result.steps[0].attempts[0].error
    (run,) = spans_by_name(exporter.get_finished_spans())["invoke_agent slow_expert"]
    assert run.attributes[sc.TASK_OUTCOME] == "cancelled" and run.attributes[sc.ERROR_TYPE] == "cancelled"


def test_a_sub_agent_returning_garbage_becomes_an_observation(tmp_path):
    result, lead_model, spans, _ = _fault_run(SubAgent("odd", "returns a dict", run=lambda task, cancel: {"x": 1}),
                                              tmp_path)
    assert result.outcome is sc.TaskOutcome.COMPLETED
    assert "sub-agent odd returned dict, not an answer" in lead_model.calls[1][-1].content
    (run,) = spans_by_name(spans)["invoke_agent odd"]
    assert run.status.status_code is StatusCode.ERROR and run.attributes[sc.TASK_OUTCOME] == "failed"
    empty, lead_model, _, _ = _fault_run(SubAgent("mute", "says nothing", run=lambda task, cancel: "  "), tmp_path)
    assert "sub-agent mute returned an empty answer" in lead_model.calls[1][-1].content


def test_one_failing_sub_agent_of_two_keeps_the_others_answer(tmp_path):
    tel, _ = capture_telemetry(MonotonicClock())
    subs = [SubAgent("weather_expert", "weather", run=lambda task, cancel: "rain"),
            SubAgent("math_expert", "math", run=lambda task, cancel: 1 / 0)]
    lead_model = Sleepy([BOTH, '{"answer": "rain"}'], 0.0)
    seen = []
    original = lead_model.chat

    def chat(messages, params, *, cancel=None):
        seen.append(messages[-1].content)
        return original(messages, params, cancel=cancel)

    lead_model.chat = chat
    result = coordinator(lead_model, subs, tel).run(Task(id="t5", prompt="both"))
    assert result.outcome is sc.TaskOutcome.COMPLETED
    assert "weather_expert: rain" in seen[1] and "math_expert: failed (sub-agent math_expert failed: ZeroDivisionError" in seen[1]


def test_a_run_not_awaited_is_overlap_off_the_delegating_steps_path(tmp_path):
    path = tmp_path / "trace.jsonl"
    clock = FakeClock()
    tel, _ = capture_telemetry(clock, trace_file=str(path))
    started, step_done = threading.Event(), threading.Event()
    with at.agent_span("lead", telemetry=tel):
        with at.step_span():
            with at.attempt_span():
                worker = threading.Thread(target=at.propagate(lambda: _background(started, step_done, clock)))
                worker.start()
                started.wait(5)
                clock.advance_s(0.1)
                at.final_answer("started the helper")
        step_done.set()  # the helper works on after the step that started it
        worker.join()
    tel.shutdown()
    report = report_from_files([str(path)])
    (task,) = report.tasks
    assert not report.problems  # a hand-off that outlives its step is not "outside its parent"
    assert task.overlap_s > 0.5 and task.sub_agents == 1
    assert task.steps[0].wall_s < 0.5


def _background(started: threading.Event, step_done: threading.Event, clock: FakeClock) -> None:
    with at.delegation_span("helper", awaited=False):
        started.set()
        step_done.wait(5)
        with at.step_span():
            clock.advance_s(1.0)
            at.final_answer("done later")
