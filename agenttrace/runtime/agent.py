"""The agent loop: a task is a sequence of steps; a step is a sequence of attempts; an attempt
generates, parses, validates and (for a tool call) executes.

    task   -> step 1 .. max_steps   until a final answer, a failed step, cancellation or deadline
    step   -> attempt 1 .. max_attempts   until one attempt's decision holds
    attempt-> generation -> parse -> validation -> tool

A model mistake (unparseable text, arguments failing the schema, a tool that raised or hung)
ends the attempt; the next attempt sees the model's reply and a message saying what was wrong.
Only a step's accepted decision and its result enter the conversation history. Every stage is a
span (SPANS.md), so the report can say where each step's time went.

The loop is traced through the public instrumentation API (`agent_span`, `step_span`,
`attempt_span`, `traced_model`, `parse_span`, `validation_span`, `tool_span`), exactly as a
user's own agent would be: one decision table (`instrument/frames.py`) names every outcome.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from agenttrace import semconv as sc
from agenttrace.errors import GenerationCancelled, ModelMistake, ParseError
from agenttrace.generation.chat import (
    CancelToken,
    ChatModel,
    Generation,
    GenerationParams,
    Message,
    prepare_constraint,
)
from agenttrace.instrument.decisions import attempt_outcome, step_outcome
from agenttrace.instrument.generation import traced_model
from agenttrace.instrument.operations import parse_span, tool_span
from agenttrace.instrument.structure import agent_span, attempt_span, step_span
from agenttrace.instrument.validation import validation_span
from agenttrace.runtime.grammar import decision_constraint
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
from agenttrace.runtime.tools import Tool, render_tool_result, run_tool, warm_up
from agenttrace.runtime.validate import VALIDATOR_NAME, validate_arguments
from agenttrace.telemetry import Telemetry

__all__ = ["Agent", "AgentConfig", "AttemptRecord", "StepRecord", "TaskResult"]

Outcome = sc.AttemptOutcome
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    name: str = "agent"
    max_steps: int = 6  # steps per task before `budget_exhausted`
    max_attempts: int = 3  # attempts per step before the step (and task) fails
    deadline_s: float | None = None  # wall-clock budget per task, checked between attempts
    params: GenerationParams = GenerationParams(max_tokens=96)
    tool_timeout_s: float | None = None  # overrides each tool's own timeout when set
    style: PromptStyle = PromptStyle()
    # Decode every reply under the grammar of a decision (runtime/grammar.py): one of the tools
    # with schema-valid arguments, or an answer. Validation still runs on what comes out.
    constrained: bool = False


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


class Agent:
    """A tool-calling agent over any `ChatModel`, traced by `telemetry`.

    `run(task)` never raises for the model's mistakes or a tool's failures: they are attempts
    with an outcome, and the returned `TaskResult` says how the task ended. Bugs raise.
    A model that reads a clock of its own (`LocalChatModel`) is bound to the telemetry's clock
    when it still uses the process default, so its prefill and round times share the spans' time
    base (and a `FakeClock` in tests drives both).
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
        bind = getattr(model, "bind_clock", None)
        if callable(bind):
            bind(self.telemetry.clock)
        self.params = config.params
        if config.constrained:
            # before the first task: a model or tokenizer that cannot be constrained fails here
            constraint = decision_constraint(tools, config.params.max_tokens)
            why = prepare_constraint(model, constraint)
            if why:
                _log.warning("agent %s decodes unconstrained: its tools' grammar does not compile (%s)", config.name, why)
            self.params = replace(config.params, constraint=constraint)
        self.model = traced_model(model, telemetry=self.telemetry)
        self.tools = {t.name: t for t in tools}
        warm_up(self.tools.values())  # a process-isolated tool's worker starts now, not in the first call
        self.examples = list(examples)
        self.config = config

    # -- task ------------------------------------------------------------------------------
    def run(self, task: Task | str, *, cancel: CancelToken | None = None) -> TaskResult:
        """Run one task to its end; returns how it ended (never raises for model mistakes)."""
        if isinstance(task, str):
            task = Task(id=uuid.uuid4().hex[:8], prompt=task)
        tel, cfg = self.telemetry, self.config
        result = TaskResult(task.id, sc.TaskOutcome.BUDGET_EXHAUSTED)
        scope = agent_span(cfg.name, task_id=task.id, model=self.model.model_name, provider=self.model.provider_name,
                           telemetry=tel)
        with scope as run:
            deadline = tel.clock.now_ns() + int(cfg.deadline_s * 1e9) if cfg.deadline_s is not None else None
            history = build_messages(list(self.tools.values()), self.examples, task.prompt, cfg.style)
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
                    result.outcome = sc.TaskOutcome.BUDGET_EXHAUSTED if self._past(deadline) else sc.TaskOutcome.FAILED
                    break
                if self._past(deadline):
                    break
            if run is not None:
                run.set_outcome(result.outcome)
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
        cfg = self.config
        step = StepRecord(n)
        with step_span(n, telemetry=self.telemetry) as frame:
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
                history.append(Message("assistant", decision_text(step.decision)))
                if isinstance(step.decision, ToolCall):
                    history.append(observation(step.result or "", cfg.style))
                else:
                    result.answer = step.decision.text
            step.outcome = step_outcome(last, final_answer=isinstance(step.decision, FinalAnswer))
            if frame is not None:
                frame.set_outcome(step.outcome, reason=step.attempts[-1].error if step.attempts else None)
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
        record = AttemptRecord(i, Outcome.OK)
        try:
            with attempt_span(telemetry=self.telemetry):
                record.generation = self.model.chat(convo, self.params, cancel=cancel)
                record.text = record.generation.text
                decision = self._parse(record.text, task, result, record.generation)
                if isinstance(decision, ToolCall):
                    tool = self.tools[decision.tool]
                    self._validate(tool, decision, task, result)
                    step.result = self._execute(tool, decision)
                step.decision = decision
        except (GenerationCancelled, ModelMistake) as exc:
            # the attempt span took its outcome from the same table (attempt_outcome)
            record.outcome, record.error = attempt_outcome(exc), str(exc)
            if isinstance(exc, ModelMistake):
                record.mistake = exc
                if record.outcome in (Outcome.PARSE_ERROR, Outcome.VALIDATION_ERROR):
                    result.decisions_invalid += 1
        return record

    def _note_valid(self, handle, task: Task, decision: ToolCall | FinalAnswer, result: TaskResult) -> None:
        result.decisions_valid += 1
        correct = decision_matches(task, decision)
        if correct is not None:
            if handle is not None:
                handle.correct(correct)
            if result.first_decision_correct is None:
                result.first_decision_correct = correct

    def _parse(self, text: str, task: Task, result: TaskResult, gen: Generation) -> ToolCall | FinalAnswer:
        with parse_span(telemetry=self.telemetry) as p:
            dead_end = gen.constrain.dead_end if gen.constrain is not None else None
            if dead_end:  # the output stopped where the grammar allowed nothing: say so, not "cut off"
                raise ParseError(f"the constrained decoder reached a dead end ({dead_end}). Reply with one JSON object.",
                                 error_type="grammar_dead_end", summary="the grammar allowed no next token")
            decision = parse_decision(text, self.tools.keys())  # a ParseError fails the parse span
            if isinstance(decision, FinalAnswer):  # the answer is the decision; its moment is now
                if p is not None:
                    p.final_answer(decision.text)
                self._note_valid(p, task, decision, result)
            elif p is not None:
                p.tool_call(decision.tool)
            return decision

    def _validate(self, tool: Tool, call: ToolCall, task: Task, result: TaskResult) -> None:
        with validation_span(tool.name, validator=VALIDATOR_NAME, telemetry=self.telemetry) as v:
            validate_arguments(tool, call.arguments)  # ArgumentsInvalid fails the validation span
            if v is not None:
                v.ok()
            self._note_valid(v, task, call, result)

    def _execute(self, tool: Tool, call: ToolCall) -> str:
        # The model's JSON names no call id, so none is recorded; arguments and result are opt-in
        # content (off by default), redacted and capped.
        with tool_span(tool.name, description=tool.description or None, arguments=call.arguments,
                       telemetry=self.telemetry) as t:
            rendered = render_tool_result(run_tool(tool, call.arguments, self.config.tool_timeout_s))
            if t is not None:  # the model sees a capped result; the span keeps its full size
                t.span.set_attributes({sc.TOOL_RESULT_SIZE: rendered.chars, sc.TOOL_RESULT_TRUNCATED: rendered.truncated})
                t.result(rendered.text)
            return rendered.text
