"""The agent loop: a task is a sequence of steps; a step is a sequence of attempts; an attempt
generates, parses, validates and (for a tool call) executes.

    task   -> step 1 .. max_steps   until a final answer, a failed step, cancellation or deadline
    step   -> attempt 1 .. max_attempts   until one attempt's decision holds
    attempt-> generation -> parse -> validation -> tool

A model mistake (unparseable text, arguments failing the schema, a tool that raised or hung)
ends the attempt; the next attempt sees the model's reply and a message saying what was wrong.
Only a step's accepted decision and its result enter the conversation history. Every stage is a
span (SPANS.md), so the report can say where each step's time went.

Between steps, at the task's level (so a failed attempt never counts them as retry cost), the
runtime may recall from memory on its own (`recall`, memory_tools.py) and compact the history
when the next prompt would exceed its token budget (`compaction`, compaction.py). A task that
makes the same tool call with the same arguments `loop_repeats` times is stopped there with
outcome `loop_detected` (the repeated call is not run again).

The loop is traced through the public instrumentation API (`agent_span`, `step_span`,
`attempt_span`, `traced_model`, `parse_span`, `validation_span`, `tool_span`), exactly as a
user's own agent would be: one decision table (`instrument/frames.py`) names every outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Literal

from agenttrace import semconv as sc
from agenttrace.core.chat import (
    CancelToken,
    ChatModel,
    Generation,
    GenerationParams,
    Message,
    prepare_constraint,
    task_cancel,
)
from agenttrace.core.decisions import attempt_outcome, is_retried, step_outcome, task_after_step
from agenttrace.core.tools import VALIDATOR_NAME, Tool, validate_arguments
from agenttrace.errors import ConstraintUnavailable, ContextTooLong, GenerationCancelled, ModelMistake, ParseError
from agenttrace.instrument.model_spans import traced_model
from agenttrace.instrument.operations import parse_span, tool_span
from agenttrace.instrument.structure import agent_span, attempt_span, delegation_span, step_span
from agenttrace.instrument.validation import validation_span
from agenttrace.runtime.compaction import CompactionConfig, Compactor
from agenttrace.runtime.decision_grammar import decision_constraint
from agenttrace.runtime.execution import render_tool_result, run_tool, warm_up
from agenttrace.runtime.memory import MemoryStore
from agenttrace.runtime.memory_tools import memory_namespace, memory_tools, recall, render_facts
from agenttrace.runtime.parse import FinalAnswer, ToolCall, parse_decision
from agenttrace.runtime.prompt import Example, PromptStyle, build_messages, decision_text, observation, retry_feedback
from agenttrace.runtime.results import AttemptRecord, StepRecord, TaskResult
from agenttrace.runtime.tasks import Task, decision_matches
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
    # Decode every reply under the grammar of a decision (runtime/decision_grammar.py): one of the tools
    # with schema-valid arguments, or an answer. Validation still runs on what comes out.
    constrained: bool = False
    # "tool": the first step must call a tool (as tool_choice "required" does for one request):
    # decoded under the grammar of a call, no answer allowed, where the model can constrain; on
    # other models an answer there is a mistake the model is told about. For agents whose small
    # models answer from their own weights what they should have looked up or delegated.
    first_step: Literal["auto", "tool"] = "auto"
    # Memory (an Agent given a MemoryStore): whether the runtime recalls on its own before a step
    # ("task_start": once, with the request; "every_step": before each step, with the request and
    # the latest result; "off": only the model's `recall` calls), how many facts, and whose
    # namespace a task run writes ("agent": every task of this agent; "task": each run its own).
    recall: Literal["off", "task_start", "every_step"] = "off"
    recall_limit: int = 3
    memory_scope: Literal["agent", "task"] = "agent"
    # Keep every prompt under a token budget by summarising older turns; None: never compact.
    compaction: CompactionConfig | None = CompactionConfig()
    # Stop the task (outcome loop_detected) when it would make the same tool call with the same
    # arguments for the loop_repeats-th time; None: never.
    loop_repeats: int | None = 3


@dataclass
class _TaskState:
    """What one task run carries between steps."""

    protected: int  # leading history messages compaction keeps (system, examples, request, notes)
    calls: Counter = field(default_factory=Counter)  # executed tool calls, by (tool, canonical arguments)
    last_prompt: list[Message] | None = None  # the previous generation's prompt (what the prefix cache holds)


class Agent:
    """A tool-calling agent over any `ChatModel`, traced by `telemetry`.

    `run(task)` never raises for the model's mistakes or a tool's failures: they are attempts
    with an outcome, and the returned `TaskResult` says how the task ended. Bugs raise.
    A model that reads a clock of its own (`LocalChatModel`) is bound to the telemetry's clock
    when it still uses the process default, so its prefill and round times share the spans' time
    base (and a `FakeClock` in tests drives both). `memory`: a store the agent gets the
    `remember` and `recall` tools over (unless tools of those names are given) and recalls from
    on its own when `config.recall` says so.
    """

    def __init__(
        self,
        model: ChatModel,
        tools: Sequence[Tool],
        *,
        telemetry: Telemetry | None = None,
        examples: Sequence[Example] = (),
        config: AgentConfig = AgentConfig(),
        memory: MemoryStore | None = None,
    ) -> None:
        tools = list(tools)
        if memory is not None:
            given = {t.name for t in tools}
            tools += [t for t in memory_tools(memory, limit=config.recall_limit) if t.name not in given]
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        self.telemetry = telemetry or Telemetry()
        bind = getattr(model, "bind_clock", None)
        if callable(bind):
            bind(self.telemetry.clock)
        self.memory = memory
        if memory is not None:
            memory.bind_clock(self.telemetry.clock)
        self.params = config.params
        if config.constrained:
            # before the first task: a model or tokenizer that cannot be constrained fails here
            constraint = decision_constraint(tools, config.params.max_tokens)
            why = prepare_constraint(model, constraint)
            if why:
                _log.warning("agent %s decodes unconstrained: its tools' grammar does not compile (%s)", config.name, why)
            self.params = replace(config.params, constraint=constraint)
        self._first_params = self.params  # what step 1 decodes with
        if config.first_step == "tool":
            self._first_params = self._call_required(model, tools, config)
        self.model = traced_model(model, telemetry=self.telemetry)
        self.compactor = Compactor(config.compaction, self.model, model, self.params.max_tokens) \
            if config.compaction is not None else None
        self.tools = {t.name: t for t in tools}
        warm_up(self.tools.values())  # a process-isolated tool's worker starts now, not in the first call
        self.examples = list(examples)
        self.config = config

    def _call_required(self, model: ChatModel, tools: Sequence[Tool], config: AgentConfig) -> GenerationParams:
        """Step 1's parameters when it must call a tool: the grammar of a call where the model can
        constrain (else the plain parameters: `_parse` refuses an answer there)."""
        constraint = decision_constraint(tools, config.params.max_tokens, answer=False)
        try:
            why = prepare_constraint(model, constraint)
        except ConstraintUnavailable:
            return self.params
        if why:
            _log.warning("agent %s: the grammar of a call does not compile (%s); an answer in step 1 is refused "
                         "instead", config.name, why)
            return self.params
        return replace(self.params, constraint=constraint)

    # -- task ------------------------------------------------------------------------------
    def run(self, task: Task | str, *, cancel: CancelToken | None = None, delegated: bool = False,
            awaited: bool = True) -> TaskResult:
        """Run one task to its end; returns how it ended (never raises for model mistakes).

        `delegated`: this agent runs a sub-task for a coordinator whose step is current (its run
        is a `delegation` span there); `awaited=False` when the coordinator does not wait."""
        if isinstance(task, str):
            task = Task(id=uuid.uuid4().hex[:8], prompt=task)
        tel, cfg = self.telemetry, self.config
        result = TaskResult(task.id, sc.TaskOutcome.BUDGET_EXHAUSTED)
        who = dict(task_id=task.id, model=self.model.model_name, provider=self.model.provider_name, telemetry=tel)
        scope = delegation_span(cfg.name, awaited=awaited, **who) if delegated else agent_span(cfg.name, **who)
        with scope as run, self._memory_scope(task), task_cancel(cancel):
            deadline = tel.clock.now_ns() + int(cfg.deadline_s * 1e9) if cfg.deadline_s is not None else None
            history = build_messages(list(self.tools.values()), self.examples, task.prompt, cfg.style)
            state = _TaskState(protected=len(history))
            for n in range(1, cfg.max_steps + 1):
                self._between_steps(n, history, task, state, result)
                step = self._step(n, history, task, result, cancel, deadline, state)
                result.steps.append(step)
                ended = task_after_step(step.outcome, loop=step.loop, out_of_time=self._past(deadline))
                if step.loop and run is not None:
                    call = step.decision
                    assert isinstance(call, ToolCall)
                    run.span.set_attributes({sc.LOOP_TOOL: call.tool, sc.LOOP_REPEATS: cfg.loop_repeats or 0})
                if ended is not None:
                    result.outcome = ended
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

    def _memory_scope(self, task: Task) -> AbstractContextManager[None]:
        """Where this run's memory calls write; nothing to set up for an agent without memory."""
        if self.memory is None:
            return nullcontext()
        cfg = self.config
        return memory_namespace(cfg.name if cfg.memory_scope == "agent" else f"{cfg.name}/{task.id}/{uuid.uuid4().hex[:8]}")

    def _past(self, deadline: int | None) -> bool:
        return deadline is not None and self.telemetry.clock.now_ns() >= deadline

    # -- between steps ---------------------------------------------------------------------
    def _between_steps(self, n: int, history: list[Message], task: Task, state: _TaskState,
                       result: TaskResult) -> None:
        """The runtime's own recall, then compaction if the next prompt is over budget. Both
        are spans of the task, outside any step."""
        cfg = self.config
        if self.memory is not None and (cfg.recall == "every_step" or (cfg.recall == "task_start" and n == 1)):
            query = task.prompt if n == 1 else f"{task.prompt} {history[-1].content}"
            found = recall(self.memory, query, limit=cfg.recall_limit, auto=True, telemetry=self.telemetry)
            if found.items:
                history.append(Message("user", "Notes from memory:\n" + render_facts(found.items)))
                if n == 1:
                    state.protected = len(history)  # the note is part of the request: compaction keeps it
        if self.compactor is None or not self.compactor.enabled:
            return
        tokens = self.compactor.over_budget(history)
        if tokens is None:
            return
        done = self.compactor.compact(history, state.protected, task.prompt, tokens, state.last_prompt,
                                      telemetry=self.telemetry)
        if done.messages is not None:
            history[:] = done.messages
            result.compactions += 1
        else:
            _log.warning("agent %s, task %s: %s; the context stays as it was", cfg.name, task.id, done.error)

    # -- step ------------------------------------------------------------------------------
    def _step(
        self,
        n: int,
        history: list[Message],
        task: Task,
        result: TaskResult,
        cancel: CancelToken | None,
        deadline: int | None,
        state: _TaskState,
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
                state.last_prompt = list(convo)
                attempt = self._attempt(i, convo, task, step, result, cancel, state)
                step.attempts.append(attempt)
                if not is_retried(attempt.outcome) or attempt.mistake is None:
                    break  # a decision, a cancellation, or an error no retry can mend (the context is full)
                convo += [Message("assistant", attempt.text), retry_feedback(attempt.mistake)]

            last = step.attempts[-1].outcome if step.attempts else Outcome.CANCELLED
            if last is Outcome.OK and not step.loop:
                assert step.decision is not None
                history.append(Message("assistant", decision_text(step.decision)))
                if isinstance(step.decision, ToolCall):
                    history.append(observation(step.result or "", cfg.style))
                else:
                    result.answer = step.decision.text
            step.outcome = step_outcome(last, final_answer=isinstance(step.decision, FinalAnswer))
            if frame is not None:
                frame.set_outcome(step.outcome, reason=step.attempts[-1].error if step.attempts else None)
                if step.loop:
                    frame.span.set_attribute(sc.LOOP_DETECTED, True)
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
        state: _TaskState,
    ) -> AttemptRecord:
        record = AttemptRecord(i, Outcome.OK)
        try:
            with attempt_span(telemetry=self.telemetry):
                params = self._first_params if step.index == 1 else self.params
                record.generation = self.model.chat(convo, params, cancel=cancel)
                record.text = record.generation.text
                decision = self._parse(record.text, task, result, record.generation, call_required=step.index == 1
                                       and self.config.first_step == "tool")
                if isinstance(decision, ToolCall):
                    tool = self.tools[decision.tool]
                    self._validate(tool, decision, task, result)
                    key = (decision.tool, json.dumps(decision.arguments, sort_keys=True, ensure_ascii=False))
                    repeats = self.config.loop_repeats
                    if repeats is not None and state.calls[key] + 1 >= repeats:
                        step.loop = True  # the same call for the repeats-th time: stop, do not run it again
                    else:
                        step.result = self._execute(tool, decision)
                        state.calls[key] += 1
                step.decision = decision
        except ContextTooLong as exc:  # nothing a retry can change: the step ends here
            record.outcome, record.error = Outcome.ERROR, str(exc)
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

    def _parse(self, text: str, task: Task, result: TaskResult, gen: Generation, *,
               call_required: bool = False) -> ToolCall | FinalAnswer:
        with parse_span(telemetry=self.telemetry) as p:
            dead_end = gen.constrain.dead_end if gen.constrain is not None else None
            if dead_end:  # the output stopped where the grammar allowed nothing: say so, not "cut off"
                raise ParseError(f"the constrained decoder reached a dead end ({dead_end}). Reply with one JSON object.",
                                 error_type="grammar_dead_end", summary="the grammar allowed no next token")
            decision = parse_decision(text, self.tools.keys())  # a ParseError fails the parse span
            if call_required and isinstance(decision, FinalAnswer):
                raise ParseError(f"call a tool first (one of {', '.join(self.tools)}); answer after its result.",
                                 error_type="tool_required", summary="an answer where a tool call was required")
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
            rendered = render_tool_result(run_tool(tool, call.arguments, self.config.tool_timeout_s), tool.result_chars)
            if t is not None:  # the model sees a capped result; the span keeps its full size
                t.span.set_attributes({sc.TOOL_RESULT_SIZE: rendered.chars, sc.TOOL_RESULT_TRUNCATED: rendered.truncated})
                t.result(rendered.text)
            return rendered.text
