"""The structure of a wrapped agent: agent, delegation, step and attempt spans."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.instrument.config import get_telemetry
from agenttrace.instrument.frames import (
    AgentRun,
    Attempt,
    Frame,
    Step,
    current_frame,
    frame_telemetry,
    place_leaf,
)
from agenttrace.instrument.scope import Scope
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.spans import mark_error

__all__ = ["agent_span", "attempt_span", "current_run", "current_step", "delegation_span", "step_span", "turn_span"]


def _agent_attributes(name: str, task_id: str, model: str | None, provider: str | None, *, agent_id: str | None,
                      description: str | None, conversation_id: str | None) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.GEN_AI_AGENT_NAME: name,
        sc.TASK_ID: task_id,
        sc.GEN_AI_CONVERSATION_ID: conversation_id or task_id,
    }
    for key, value in ((sc.GEN_AI_REQUEST_MODEL, model), (sc.GEN_AI_PROVIDER_NAME, provider), (sc.GEN_AI_AGENT_ID, agent_id),
                       (sc.GEN_AI_AGENT_DESCRIPTION, description)):
        if value:
            attrs[key] = value
    return attrs


class agent_span(Scope[AgentRun]):  # noqa: N801 - used like a function: `with agent_span("bot") as run`
    """An agent run: `invoke_agent {name}`, as our own loop writes it (SPANS.md, segment agent).

    As a decorator, every call of the function is one run. `task_id` defaults to a fresh id and
    is also the `gen_ai.conversation.id` unless `conversation_id` is given; `agent_id` and
    `description` are `gen_ai.agent.id` / `gen_ai.agent.description`. `model` and `provider`
    (`gen_ai.request.model`, `gen_ai.provider.name`) are set when the span starts if given (the
    GenAI conventions want the provider at creation, for samplers), else from the first
    generation recorded in the run when it ends. The handle (`AgentRun`) counts steps, decisions
    and the tokens of its generations (`gen_ai.usage.*`) and writes them, with the task outcome,
    when the run ends; `run.set_outcome(...)` overrides the inferred outcome. A run that does not
    end `completed` has status ERROR, as in our loop.
    """

    _segment = sc.Segment.AGENT

    def __init__(
        self,
        name: str = "agent",
        *,
        task_id: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        agent_id: str | None = None,
        description: str | None = None,
        conversation_id: str | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        super().__init__(name, task_id=task_id, model=model, provider=provider, agent_id=agent_id,
                         description=description, conversation_id=conversation_id, telemetry=telemetry)
        self.name, self.task_id, self.model, self.provider = name, task_id, model, provider
        self.agent_id, self.description, self.conversation_id = agent_id, description, conversation_id
        self.telemetry = telemetry

    def _kind(self) -> SpanKind:
        return SpanKind.INTERNAL

    def _place(self) -> tuple[Telemetry, Context | None, Sequence[Link]]:
        """The telemetry, parent context and links of the run's span."""
        if current_frame() is None:
            return self.telemetry or get_telemetry(), None, ()
        placement = place_leaf(self.telemetry)  # a run inside a step (a sub-agent): like any span of that step
        parent = placement.parent
        if parent is None:  # a more specific span is current: the run goes under it
            parent = otel_context.get_current()
        return placement.tel, parent, ()

    def _open(self) -> tuple[AgentRun, Telemetry, Span, Frame | None]:
        task_id = self.task_id or uuid.uuid4().hex[:8]
        tel, parent, links = self._place()
        attrs = _agent_attributes(self.name, task_id, self.model, self.provider, agent_id=self.agent_id,
                                  description=self.description, conversation_id=self.conversation_id)
        span = tel.start_span(self._segment, sc.agent_span_name(self.name), attrs, kind=self._kind(), parent=parent,
                              links=links)
        run = AgentRun(tel, span, self.name, task_id, model=self.model, provider=self.provider)
        return run, tel, span, run

    def _close(self, run: AgentRun, exc: BaseException | None) -> None:
        pending = run.open_step
        if pending is not None:  # the loop ended on a turn that left its step open (a failed last try)
            run.open_step = None
            finish_step(pending, exc)
        outcome = run.final_outcome(exc)
        attrs: dict[str, AttributeValue] = {
            sc.TASK_OUTCOME: outcome.value,
            sc.STEPS: run.steps,
            sc.DECISIONS_VALID: run.decisions_valid,
            sc.DECISIONS_INVALID: run.decisions_invalid,
        }
        if run.model and not self.model:
            attrs[sc.GEN_AI_REQUEST_MODEL] = run.model
        if run.provider and not self.provider:
            attrs[sc.GEN_AI_PROVIDER_NAME] = run.provider
        if run.saw_usage:
            attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = run.input_tokens
            attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = run.output_tokens
        run.span.set_attributes(attrs)
        if exc is None and outcome is not sc.TaskOutcome.COMPLETED:
            mark_error(run.span, outcome.value, f"task {run.task_id} ended {outcome.value}")
        run.tel.end_span(run.span, exc)


class delegation_span(agent_span):  # noqa: N801
    """A sub-agent run delegated from the current step: `invoke_agent {name}` with segment
    `delegation` and the agent attributes. Its own steps nest inside it.

    `awaited=False` (the delegating agent goes on without waiting) records the hand-off as
    messaging does (SPANS.md): a PRODUCER `invoke_agent {name}` span in the delegating step that
    ends as soon as the run starts, and the run itself as its CONSUMER child, linked to the span
    it was delegated from. The reports (and Jaeger's critical path) then keep the run off the
    delegating step's path and show it as overlap, however long it runs.
    """

    _segment = sc.Segment.DELEGATION

    def __init__(
        self,
        name: str,
        *,
        task_id: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        agent_id: str | None = None,
        description: str | None = None,
        awaited: bool = True,
        telemetry: Telemetry | None = None,
    ) -> None:
        super().__init__(name, task_id=task_id, model=model, provider=provider, agent_id=agent_id,
                         description=description, telemetry=telemetry)
        self._kwargs["awaited"] = awaited
        self.awaited = awaited

    def _kind(self) -> SpanKind:
        return SpanKind.INTERNAL if self.awaited else SpanKind.CONSUMER

    def _place(self) -> tuple[Telemetry, Context | None, Sequence[Link]]:
        tel, parent, links = super()._place()
        if self.awaited or parent is None:
            return tel, parent, links
        origin = trace.get_current_span(parent)
        handoff = tel.start_span(self._segment, sc.agent_span_name(self.name),
                                 {sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.GEN_AI_AGENT_NAME: self.name},
                                 kind=SpanKind.PRODUCER, parent=parent)
        tel.end_span(handoff)
        return tel, trace.set_span_in_context(handoff), (Link(origin.get_span_context()),)


def _enclosing_run(frame: Frame | None) -> AgentRun | None:
    if isinstance(frame, Attempt):
        return frame.step.run
    if isinstance(frame, Step):
        return frame.run
    return frame if isinstance(frame, AgentRun) else None


class step_span(Scope[Step]):  # noqa: N801
    """One step of the current run: `agent_step {n}`, n counted per run unless `index` is given.

    Spans recorded in the step open its attempt (`attempt 1`) on first use; `step.retry()` ends
    that attempt so the next span opens `attempt 2`. Outside a run the step is a root span.
    """

    def __init__(self, index: int | None = None, *, telemetry: Telemetry | None = None) -> None:
        super().__init__(index, telemetry=telemetry)
        self.index, self.telemetry = index, telemetry

    def _open(self) -> tuple[Step, Telemetry, Span, Frame | None]:
        frame = current_frame()
        run = _enclosing_run(frame)
        tel = self.telemetry or frame_telemetry(frame) or get_telemetry()
        step = open_step(tel, run, self.index)
        return step, tel, step.span, step

    def _close(self, step: Step, exc: BaseException | None) -> None:
        finish_step(step, exc)


def finish_step(step: Step, exc: BaseException | None) -> None:
    """End a step's open attempt, then the step, with its outcome (from its last attempt)."""
    current = step.current
    if current is not None:
        step.close_attempt(current, exc if current.implicit else None)
    outcome = step.final_outcome(exc)
    if step.run is not None:
        step.run.last_step_outcome = outcome
    step.span.set_attributes({sc.STEP_OUTCOME: outcome.value, sc.STEP_ATTEMPTS: step.attempts})
    if exc is None and outcome not in (sc.StepOutcome.TOOL_CALL, sc.StepOutcome.FINAL_ANSWER):
        mark_error(step.span, outcome.value, step.failure_message(outcome))
    step.tel.end_span(step.span, exc)


def open_step(tel: Telemetry, run: AgentRun | None, index: int | None = None) -> Step:
    """Start a step span under `run` (a root span outside a run), numbered per run."""
    n = run.next_step_index() if run is not None else 1
    if index is not None:
        n = index
    parent = trace.set_span_in_context(run.span) if run is not None else None
    span = tel.start_span(sc.Segment.STEP, sc.step_span_name(n), {sc.STEP_INDEX: n}, parent=parent)
    return Step(tel, run, span, n)


class attempt_span(Scope[Attempt]):  # noqa: N801
    """An explicit attempt of the current step (`attempt {i}`), for loops that retry a decision
    themselves. Ends the step's open implicit attempt first. Outside a step it opens a step."""

    def __init__(self, *, telemetry: Telemetry | None = None) -> None:
        super().__init__(telemetry=telemetry)
        self.telemetry = telemetry
        self._own_step: step_span | None = None

    def _open(self) -> tuple[Attempt, Telemetry, Span, Frame | None]:
        frame = current_frame()
        step = frame if isinstance(frame, Step) else frame.step if isinstance(frame, Attempt) else None
        if step is None:
            self._own_step = step_span(telemetry=self.telemetry)
            step = self._own_step.__enter__()
        attempt = step.open_attempt(implicit=False)
        return attempt, step.tel, attempt.span, attempt

    def _close(self, attempt: Attempt, exc: BaseException | None) -> None:
        attempt.step.close_attempt(attempt, exc)
        if self._own_step is not None:
            own, self._own_step = self._own_step, None
            own.__exit__(type(exc) if exc else None, exc, None)


def current_run() -> AgentRun | None:
    """The innermost open agent (or delegated) run in this context, if any."""
    return _enclosing_run(current_frame())


def current_step() -> Step | None:
    """The innermost open step in this context, if any."""
    frame = current_frame()
    if isinstance(frame, Attempt):
        return frame.step
    return frame if isinstance(frame, Step) else None


# Attempt outcomes after which a `turn_span` leaves its step open: the model's mistake (or a call
# that failed) is retried by the loop's next turn, which is the same decision tried again.
_RETRIED = frozenset({sc.AttemptOutcome.PARSE_ERROR, sc.AttemptOutcome.VALIDATION_ERROR, sc.AttemptOutcome.TOOL_ERROR,
                      sc.AttemptOutcome.TIMEOUT, sc.AttemptOutcome.ERROR})


class turn_span(Scope[Attempt]):  # noqa: N801
    """One turn of an agent's own loop, for loops whose retry is simply their next turn.

    Each turn is an attempt (`attempt {i}`, current inside the block, so spans of other
    instrumentations nest in it too). A turn that ends with a decision (a valid or executed tool
    call, a final answer, or nothing that failed) ends its step (`agent_step {n}`); a turn whose
    parse, validation, tool or model call failed leaves the step open, and the next turn of the
    same run is that step's next attempt. So a loop that feeds a tool's error back to the model
    gets one step with two attempts, not two steps. The run's end closes a step left open (its
    outcome is then the last attempt's failure). An exception leaving the block ends the step.
    Outside an `agent_span` every turn is a step of its own.
    """

    def __init__(self, *, telemetry: Telemetry | None = None) -> None:
        super().__init__(telemetry=telemetry)
        self.telemetry = telemetry

    def _open(self) -> tuple[Attempt, Telemetry, Span, Frame | None]:
        frame = current_frame()
        run = _enclosing_run(frame)
        tel = self.telemetry or frame_telemetry(frame) or get_telemetry()
        step = None
        if run is not None:
            with run._lock:
                step, run.open_step = run.open_step, None
        if step is None:
            step = open_step(tel, run)
        attempt = step.open_attempt(implicit=False)
        return attempt, step.tel, attempt.span, attempt

    def _close(self, attempt: Attempt, exc: BaseException | None) -> None:
        step = attempt.step
        step.close_attempt(attempt, exc)
        run = step.run
        if exc is None and run is not None and attempt.outcome in _RETRIED:
            with run._lock:
                if run.open_step is None:
                    run.open_step = step
                    return
        finish_step(step, exc)
