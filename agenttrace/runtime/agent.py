"""The agent loop: a task is a sequence of steps; a step is a sequence of attempts; an attempt
generates, parses, validates and (for a tool call) executes.

    task   -> step 1 .. max_steps   until a final answer, a failed step, cancellation or deadline
    step   -> attempt 1 .. max_attempts   until one attempt's decision holds
    attempt-> generation -> parse -> validation -> tool

A model mistake (unparseable text, arguments failing the schema, a tool that raised or hung)
ends the attempt; the next attempt sees the model's reply and a message saying what was wrong.
Only a step's accepted decision and its result enter the conversation history. Every stage is a
span (SPANS.md), so the report can say where each step's time went.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.trace import Span

from agenttrace import semconv as sc
from agenttrace.errors import (
    ArgumentsInvalid,
    GenerationCancelled,
    ModelMistake,
    ParseError,
    ToolFailed,
)
from agenttrace.generation.chat import (
    CancelToken,
    ChatModel,
    Generation,
    GenerationParams,
    Message,
)
from agenttrace.runtime.parse import FinalAnswer, ToolCall, parse_decision
from agenttrace.runtime.prompt import (
    Example,
    PromptStyle,
    build_messages,
    decision_text,
    observation,
    retry_feedback,
)
from agenttrace.runtime.tasks import Task, decision_matches
from agenttrace.runtime.tools import Tool, render_result, run_tool
from agenttrace.runtime.validate import VALIDATOR_NAME, validate_arguments
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.generation import InstrumentedModel
from agenttrace.telemetry.spans import mark_error, tool_attributes

__all__ = ["Agent", "AgentConfig", "AttemptRecord", "StepRecord", "TaskResult"]

Outcome = sc.AttemptOutcome


@dataclass(frozen=True)
class AgentConfig:
    name: str = "agent"
    max_steps: int = 6  # steps per task before `budget_exhausted`
    max_attempts: int = 3  # attempts per step before the step (and task) fails
    deadline_s: float | None = None  # wall-clock budget per task, checked between attempts
    params: GenerationParams = GenerationParams(max_tokens=96)
    tool_timeout_s: float | None = None  # overrides each tool's own timeout when set
    style: PromptStyle = PromptStyle()


@dataclass
class AttemptRecord:
    index: int
    outcome: sc.AttemptOutcome
    text: str = ""
    error: str | None = None
    mistake: ModelMistake | None = None  # what the next attempt is told about
    generation: Generation | None = None


@dataclass
class StepRecord:
    index: int
    outcome: sc.StepOutcome = sc.StepOutcome.INVALID
    attempts: list[AttemptRecord] = field(default_factory=list)
    decision: ToolCall | FinalAnswer | None = None
    result: str | None = None  # what the tool returned, as shown to the model


@dataclass
class TaskResult:
    task_id: str
    outcome: sc.TaskOutcome
    steps: list[StepRecord] = field(default_factory=list)
    answer: str | None = None
    decisions_valid: int = 0
    decisions_invalid: int = 0
    # Whether the first valid decision matched the task's expectation (None: nothing to check).
    first_decision_correct: bool | None = None

    @property
    def generations(self) -> list[Generation]:
        return [a.generation for s in self.steps for a in s.attempts if a.generation is not None]


_STEP_FAILURE = {
    Outcome.PARSE_ERROR: sc.StepOutcome.INVALID,
    Outcome.VALIDATION_ERROR: sc.StepOutcome.INVALID,
    Outcome.TOOL_ERROR: sc.StepOutcome.ERROR,
    Outcome.TIMEOUT: sc.StepOutcome.ERROR,
    Outcome.CANCELLED: sc.StepOutcome.CANCELLED,
}


def _attempt_outcome(mistake: ModelMistake) -> sc.AttemptOutcome:
    if isinstance(mistake, ParseError):
        return Outcome.PARSE_ERROR
    if isinstance(mistake, ArgumentsInvalid):
        return Outcome.VALIDATION_ERROR
    if isinstance(mistake, ToolFailed) and mistake.timed_out:
        return Outcome.TIMEOUT
    return Outcome.TOOL_ERROR


class Agent:
    """A tool-calling agent over any `ChatModel`, traced by `telemetry`.

    `run(task)` never raises for the model's mistakes or a tool's failures: they are attempts
    with an outcome, and the returned `TaskResult` says how the task ended. Bugs raise.
    """

    def __init__(
        self,
        model: ChatModel,
        tools: Sequence[Tool],
        *,
        telemetry: Telemetry | None = None,
        examples: Sequence[Example] = (),
        config: AgentConfig = AgentConfig(),
    ) -> None:
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        self.telemetry = telemetry or Telemetry()
        self.model = InstrumentedModel(model, self.telemetry)
        self.tools = {t.name: t for t in tools}
        self.examples = list(examples)
        self.config = config

    # -- task ------------------------------------------------------------------------------
    def run(self, task: Task | str, *, cancel: CancelToken | None = None) -> TaskResult:
        """Run one task to its end; returns how it ended (never raises for model mistakes)."""
        if isinstance(task, str):
            task = Task(id=uuid.uuid4().hex[:8], prompt=task)
        tel, cfg = self.telemetry, self.config
        result = TaskResult(task.id, sc.TaskOutcome.BUDGET_EXHAUSTED)
        attrs = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.GEN_AI_AGENT_NAME: cfg.name,
            sc.GEN_AI_PROVIDER_NAME: self.model.provider_name,
            sc.GEN_AI_REQUEST_MODEL: self.model.model_name,
            sc.GEN_AI_CONVERSATION_ID: task.id,
            sc.TASK_ID: task.id,
        }
        with tel.span(sc.Segment.AGENT, sc.agent_span_name(cfg.name), attrs) as span:
            deadline = tel.clock.now_ns() + int(cfg.deadline_s * 1e9) if cfg.deadline_s is not None else None
            history = build_messages(list(self.tools.values()), self.examples, task.prompt, cfg.style)
            try:
                for n in range(1, cfg.max_steps + 1):
                    step = self._step(n, history, task, result, cancel, deadline)
                    result.steps.append(step)
                    if step.outcome is sc.StepOutcome.FINAL_ANSWER:
                        result.outcome = sc.TaskOutcome.COMPLETED
                        break
                    if step.outcome is sc.StepOutcome.CANCELLED:
                        result.outcome = sc.TaskOutcome.CANCELLED
                        break
                    if step.outcome is not sc.StepOutcome.TOOL_CALL:
                        result.outcome = (
                            sc.TaskOutcome.BUDGET_EXHAUSTED if self._past(deadline) else sc.TaskOutcome.FAILED
                        )
                        break
                    if self._past(deadline):
                        break
            finally:
                span.set_attributes(
                    {
                        sc.TASK_OUTCOME: result.outcome.value,
                        sc.STEPS: len(result.steps),
                        sc.DECISIONS_VALID: result.decisions_valid,
                        sc.DECISIONS_INVALID: result.decisions_invalid,
                        sc.GEN_AI_USAGE_INPUT_TOKENS: sum(g.input_tokens for g in result.generations),
                        sc.GEN_AI_USAGE_OUTPUT_TOKENS: sum(g.output_tokens for g in result.generations),
                    }
                )
            if result.outcome is not sc.TaskOutcome.COMPLETED:
                mark_error(span, result.outcome.value, f"task {task.id} ended {result.outcome.value}")
        return result

    async def arun(self, task: Task | str) -> TaskResult:
        """`run` on a worker thread; cancelling the awaiting task stops it within one round."""
        cancel = CancelToken()
        worker = asyncio.ensure_future(asyncio.to_thread(self.run, task, cancel=cancel))
        try:
            return await asyncio.shield(worker)
        except asyncio.CancelledError:
            cancel.cancel()
            await asyncio.wait([worker])  # let spans close and caches go before propagating
            raise

    def _past(self, deadline: int | None) -> bool:
        return deadline is not None and self.telemetry.clock.now_ns() >= deadline

    # -- step ------------------------------------------------------------------------------
    def _step(
        self,
        n: int,
        history: list[Message],
        task: Task,
        result: TaskResult,
        cancel: CancelToken | None,
        deadline: int | None,
    ) -> StepRecord:
        tel, cfg = self.telemetry, self.config
        step = StepRecord(n)
        with tel.span(sc.Segment.STEP, sc.step_span_name(n), {sc.STEP_INDEX: n}) as span:
            convo = list(history)  # retries extend a copy; history gets only the accepted turn
            for i in range(1, cfg.max_attempts + 1):
                if cancel is not None and cancel.cancelled:
                    step.attempts.append(AttemptRecord(i, Outcome.CANCELLED, error="cancelled before the attempt"))
                    break
                if i > 1 and self._past(deadline):
                    break
                attempt = self._attempt(i, convo, task, step, result, cancel)
                step.attempts.append(attempt)
                if attempt.outcome in (Outcome.OK, Outcome.CANCELLED):
                    break
                assert attempt.mistake is not None
                convo += [Message("assistant", attempt.text), retry_feedback(attempt.mistake)]

            last = step.attempts[-1].outcome if step.attempts else Outcome.CANCELLED
            if last is Outcome.OK:
                assert step.decision is not None
                step.outcome = (
                    sc.StepOutcome.FINAL_ANSWER if isinstance(step.decision, FinalAnswer) else sc.StepOutcome.TOOL_CALL
                )
                history.append(Message("assistant", decision_text(step.decision)))
                if isinstance(step.decision, ToolCall):
                    history.append(observation(step.result or "", cfg.style))
                else:
                    result.answer = step.decision.text
            else:
                step.outcome = _STEP_FAILURE[last]
                mark_error(span, step.outcome.value, step.attempts[-1].error or step.outcome.value)
            span.set_attributes({sc.STEP_OUTCOME: step.outcome.value, sc.STEP_ATTEMPTS: len(step.attempts)})
        return step

    # -- attempt ---------------------------------------------------------------------------
    def _attempt(
        self,
        i: int,
        convo: list[Message],
        task: Task,
        step: StepRecord,
        result: TaskResult,
        cancel: CancelToken | None,
    ) -> AttemptRecord:
        tel = self.telemetry
        with tel.span(sc.Segment.ATTEMPT, sc.attempt_span_name(i), {sc.ATTEMPT_INDEX: i}) as span:
            record = AttemptRecord(i, Outcome.OK)
            try:
                record.generation = self.model.chat(convo, self.config.params, cancel=cancel)
                record.text = record.generation.text
                decision = self._parse(record.text, task, result)
                if isinstance(decision, ToolCall):
                    tool = self.tools[decision.tool]
                    self._validate(tool, decision, task, result)
                    step.result = self._execute(tool, decision)
                step.decision = decision
            except GenerationCancelled as exc:
                record.outcome, record.error = Outcome.CANCELLED, str(exc)
                mark_error(span, sc.ERROR_CANCELLED, str(exc))
            except ModelMistake as mistake:
                record.outcome, record.error, record.mistake = _attempt_outcome(mistake), str(mistake), mistake
                if record.outcome in (Outcome.PARSE_ERROR, Outcome.VALIDATION_ERROR):
                    result.decisions_invalid += 1
                mark_error(span, record.outcome.value, str(mistake))
            span.set_attribute(sc.ATTEMPT_OUTCOME, record.outcome.value)
        return record

    def _note_valid(self, span: Span, task: Task, decision: ToolCall | FinalAnswer, result: TaskResult) -> None:
        result.decisions_valid += 1
        correct = decision_matches(task, decision)
        if correct is not None:
            span.set_attribute(sc.DECISION_CORRECT, correct)
            if result.first_decision_correct is None:
                result.first_decision_correct = correct

    def _parse(self, text: str, task: Task, result: TaskResult) -> ToolCall | FinalAnswer:
        with self.telemetry.span(sc.Segment.PARSE, sc.SPAN_PARSE) as span:
            try:
                decision = parse_decision(text, self.tools.keys())
            except ParseError:
                span.set_attribute(sc.PARSE_OK, False)
                raise
            kind = "final_answer" if isinstance(decision, FinalAnswer) else "tool_call"
            span.set_attributes({sc.PARSE_OK: True, sc.PARSE_RESULT: kind})
            if isinstance(decision, FinalAnswer):  # the answer is the decision; its moment is now
                self._note_valid(span, task, decision, result)
            return decision

    def _validate(self, tool: Tool, call: ToolCall, task: Task, result: TaskResult) -> None:
        attrs = {sc.GEN_AI_TOOL_NAME: tool.name, sc.VALIDATION_VALIDATOR: VALIDATOR_NAME}
        with self.telemetry.span(sc.Segment.VALIDATION, sc.validation_span_name(tool.name), attrs) as span:
            try:
                validate_arguments(tool, call.arguments)
            except ArgumentsInvalid as exc:
                span.set_attributes({sc.VALIDATION_OK: False, sc.VALIDATION_ERRORS: exc.count})
                raise
            span.set_attributes({sc.VALIDATION_OK: True, sc.VALIDATION_ERRORS: 0})
            self._note_valid(span, task, call, result)

    def _execute(self, tool: Tool, call: ToolCall) -> str:
        # The model's JSON names no call id, so none is recorded (tool_attributes).
        attrs = tool_attributes(tool.name, description=tool.description or None)
        with self.telemetry.span(sc.Segment.TOOL, sc.tool_span_name(tool.name), attrs) as span:
            rendered = render_result(run_tool(tool, call.arguments, self.config.tool_timeout_s))
            # opt-in content (off by default): arguments and result, redacted and capped
            self.telemetry.guard("recording content", self.telemetry.content.record_tool_call, span, call.arguments, rendered)
            return rendered
