"""Where a wrapped agent is: the agent run, step and attempt that the next span belongs to.

The instrumentation API keeps one context variable, the innermost open *frame* (an `AgentRun`,
`Step` or explicit `Attempt`), next to OpenTelemetry's own current span. Both are contextvars, so
both follow asyncio tasks and, through `propagate`, thread pools. Frames are shared objects: the
parallel tool calls of one step all see (and count into) the same step.

Spans are placed so that the tree is the one our own loop writes (SPANS.md):

    invoke_agent {name}        agent_span / delegation_span
      agent_step {n}           step_span (n counted per run)
        attempt {i}            opened lazily by the first span recorded in a step that has no
                               open attempt, or explicitly with attempt_span; step.retry() ends it
          chat / parse_tool_call / validate_arguments / execute_tool / memory / compaction

A leaf span's parent is the current OpenTelemetry span when that is more specific than the frame
(inside a tool span, a generation, or the user's own span of the same trace); otherwise the
frame's attempt (or the frame itself, outside steps).
"""

from __future__ import annotations

import threading
from contextvars import ContextVar, Token
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from agenttrace import semconv as sc
from agenttrace.core.decisions import Flags, attempt_outcome, is_cancellation, step_outcome, task_outcome
from agenttrace.instrument.config import get_telemetry
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.spans import error_type, mark_error

Outcome = sc.AttemptOutcome
_FRAME: ContextVar[AgentRun | Step | Attempt | None] = ContextVar("agenttrace_frame", default=None)


# -- frames -------------------------------------------------------------------------------------
class AgentRun:
    """One agent (or delegated sub-agent) run: its span and what its steps decided.

    `set_outcome` overrides the outcome; otherwise it is `cancelled` or `failed` when an exception
    ends the run, `completed` when a final answer was recorded, `failed` when the last step was
    invalid or an error, and `budget_exhausted` when the run ended after a tool call.
    """

    def __init__(self, tel: Telemetry, span: Span, name: str, task_id: str, *, model: str | None, provider: str | None):
        self.tel, self.span, self.name, self.task_id = tel, span, name, task_id
        self.model, self.provider = model, provider
        self.steps = 0
        self.decisions_valid = 0
        self.decisions_invalid = 0
        self.final_answers = 0
        self.input_tokens = 0  # summed over the run's generations: gen_ai.usage.* on the agent span
        self.output_tokens = 0
        self.saw_usage = False
        self.last_step_outcome: sc.StepOutcome | None = None
        self.outcome: sc.TaskOutcome | None = None
        self.open_step: Step | None = None  # a step an invalid `turn_span` left open for the next turn
        self._lock = threading.Lock()

    def set_outcome(self, outcome: sc.TaskOutcome | str) -> None:
        """Override the task outcome (`completed`, `failed`, `cancelled`, `budget_exhausted`)."""
        self.outcome = sc.TaskOutcome(outcome)

    def next_step_index(self) -> int:
        with self._lock:
            self.steps += 1
            return self.steps

    def count(self, *, valid: int = 0, invalid: int = 0, final: int = 0) -> None:
        with self._lock:
            self.decisions_valid += valid
            self.decisions_invalid += invalid
            self.final_answers += final

    def add_usage(self, input_tokens: int | None, output_tokens: int | None) -> None:
        with self._lock:
            self.saw_usage = True
            self.input_tokens += int(input_tokens or 0)
            self.output_tokens += int(output_tokens or 0)

    def saw_model(self, model: str | None, provider: str | None) -> None:
        with self._lock:
            self.model = self.model or model
            self.provider = self.provider or provider

    def final_outcome(self, exc: BaseException | None) -> sc.TaskOutcome:
        if self.outcome is not None:
            return self.outcome
        outcome = task_outcome(failed=exc is not None, cancelled=exc is not None and is_cancellation(exc),
                               final_answers=self.final_answers, steps=self.steps, last_step=self.last_step_outcome,
                               after_tool_call=sc.TaskOutcome.BUDGET_EXHAUSTED)
        assert outcome is not None  # our wrappers always know: see task_outcome
        return outcome


class Attempt:
    """One try at a step's decision. `set_outcome` overrides what its spans imply."""

    def __init__(self, step: Step, span: Span, index: int, *, implicit: bool) -> None:
        self.step, self.span, self.index, self.implicit = step, span, index, implicit
        self.flags = Flags()
        self.outcome: sc.AttemptOutcome | None = None
        self.error: BaseException | None = None  # what ended it, for the step's status message
        self.ended = False

    @property
    def run(self) -> AgentRun | None:
        return self.step.run

    def set_outcome(self, outcome: sc.AttemptOutcome | str) -> None:
        self.outcome = sc.AttemptOutcome(outcome)

    def finish(self, exc: BaseException | None) -> sc.AttemptOutcome:
        """End the span with its outcome (once); returns the outcome."""
        if self.outcome is None:
            self.outcome = self.flags.outcome()
            if exc is not None:
                # the exception names the outcome unless it is a plain error a span already
                # explained (a tool that raised: tool_error, not error)
                by_exc = attempt_outcome(exc)
                if by_exc is not Outcome.ERROR or self.outcome is Outcome.OK:
                    self.outcome = by_exc
        if not self.ended:
            self.ended = True
            self.error = exc
            self.span.set_attribute(sc.ATTEMPT_OUTCOME, self.outcome.value)
            if self.outcome is not Outcome.OK:
                # error.type is the attempt's outcome (parse_error, timeout, ...); the failing
                # child span (parse, tool) carries the finer kind; an unexpected error its type.
                # The exception's text is content (it may quote the model or the tool): the
                # policy decides what of it the status message keeps.
                kind = error_type(exc) if exc is not None and self.outcome is Outcome.ERROR else self.outcome.value
                content = self.step.tel.content
                why = content.describe_error(exc) if exc is not None else f"attempt {self.index} ended {kind}"
                mark_error(self.span, kind, why)
            self.span.end(end_time=self.step.tel.clock.now_ns())
        return self.outcome


class Step:
    """One step of a run: a decision, tried by one or more attempts.

    `retry(outcome)` ends the current attempt (its outcome inferred from its spans unless given);
    the next span recorded in the step opens the next attempt. `set_outcome` overrides the step
    outcome, which is otherwise the last attempt's: `final_answer` or `tool_call` when it held a
    final answer or a valid (or executed) tool call, `invalid` for parse or validation failures,
    `error` for failed tools or other errors, `cancelled`.
    """

    def __init__(self, tel: Telemetry, run: AgentRun | None, span: Span, index: int) -> None:
        self.tel, self.run, self.span, self.index = tel, run, span, index
        self.attempts = 0
        self.current: Attempt | None = None
        self.last: Attempt | None = None
        self.outcome: sc.StepOutcome | None = None
        self.reason: str | None = None  # why a failed step failed, for its status message
        self._lock = threading.Lock()

    def set_outcome(self, outcome: sc.StepOutcome | str, *, reason: str | None = None) -> None:
        """Override the outcome. `reason` (why it failed) is content: it reaches the status
        message only when content capture is on, redacted; otherwise the message names the
        step's outcome and its last attempt's error kind."""
        self.outcome = sc.StepOutcome(outcome)
        self.reason = reason

    def failure_message(self, outcome: sc.StepOutcome) -> str:
        """The status message of a step that ended `outcome` without a decision."""
        content = self.tel.content
        last_error = self.last.error if self.last is not None else None
        summary = f"step {self.index} ended {outcome.value}"
        if last_error is not None:
            summary += f": {content.describe_error(last_error)}"
        return content.status_text(self.reason, summary)

    def open_attempt(self, *, implicit: bool) -> Attempt:
        """A new attempt span under this step (ending the open implicit one first)."""
        with self._lock:
            previous, self.current = self.current, None
            if previous is not None:
                previous.finish(None)
            return self._new_attempt(implicit)

    def ensure_attempt(self) -> Attempt:
        """The open attempt, or a new implicit one. Check and open are one step under the lock,
        so spans recorded at once from several threads share one attempt, not one each."""
        with self._lock:
            return self.current if self.current is not None else self._new_attempt(True)

    def _new_attempt(self, implicit: bool) -> Attempt:  # the caller holds the lock
        self.attempts += 1
        index = self.attempts
        parent = trace.set_span_in_context(self.span)
        span = self.tel.start_span(sc.Segment.ATTEMPT, sc.attempt_span_name(index), {sc.ATTEMPT_INDEX: index}, parent=parent)
        attempt = Attempt(self, span, index, implicit=implicit)
        self.current = self.last = attempt
        return attempt

    def close_attempt(self, attempt: Attempt, exc: BaseException | None) -> None:
        with self._lock:
            if self.current is attempt:
                self.current = None
        attempt.finish(exc)

    def retry(self, outcome: sc.AttemptOutcome | str | None = None) -> None:
        """End the current attempt as failed (with `outcome`, else what its spans imply)."""
        with self._lock:
            attempt, self.current = self.current, None
        if attempt is None:
            return
        if outcome is not None:
            attempt.set_outcome(outcome)
        elif attempt.flags.outcome() is Outcome.OK:
            attempt.set_outcome(Outcome.ERROR)  # a retry says the attempt did not hold
        attempt.finish(None)

    def final_outcome(self, exc: BaseException | None) -> sc.StepOutcome:
        if self.outcome is not None:
            return self.outcome
        if exc is not None:
            return sc.StepOutcome.CANCELLED if is_cancellation(exc) else sc.StepOutcome.ERROR
        last = self.last
        if last is None:
            return sc.StepOutcome.INVALID
        return step_outcome(last.outcome or Outcome.ERROR, final_answer=last.flags.final_answer,
                            decided=last.flags.valid_call or last.flags.tool_ok)


Frame = AgentRun | Step | Attempt


def current_frame() -> Frame | None:
    return _FRAME.get()


def push_frame(frame: Frame) -> Token[Frame | None]:
    return _FRAME.set(frame)


def pop_frame(token: Token[Frame | None]) -> None:
    try:
        _FRAME.reset(token)
    except ValueError:  # exited in another context than it was entered in; nothing to restore
        pass


def _chain(frame: Frame | None) -> tuple[AgentRun | None, Step | None, Attempt | None]:
    if isinstance(frame, Attempt):
        return frame.step.run, frame.step, frame
    if isinstance(frame, Step):
        return frame.run, frame, None
    if isinstance(frame, AgentRun):
        return frame, None, None
    return None, None, None


@dataclass
class Placement:
    """Where a new span goes: its telemetry, its parent context and the frames it counts into."""

    tel: Telemetry
    parent: Context | None
    run: AgentRun | None = None
    step: Step | None = None
    attempt: Attempt | None = None

    def note(self, **flags: bool) -> None:
        """Set attempt flags (`valid_call=True`, ...) on the attempt this span belongs to."""
        if self.attempt is not None:
            for name, value in flags.items():
                if value:
                    setattr(self.attempt.flags, name, True)

    def named_by_response(self, span: Span, model: str, operation: str = sc.OP_CHAT) -> None:
        """A generation opened without a model name, named after the model its response gave
        (and that model counted as the run's, if it had none)."""
        span.update_name(sc.generation_span_name(model, operation))
        if self.run is not None:
            self.run.saw_model(model, None)

    def usage(self, input_tokens: int | None, output_tokens: int | None) -> None:
        """Count a generation's tokens into its run (the agent span's aggregated usage)."""
        if self.run is not None and (input_tokens is not None or output_tokens is not None):
            self.run.add_usage(input_tokens, output_tokens)


def frame_telemetry(frame: Frame | None) -> Telemetry | None:
    if isinstance(frame, Attempt):
        return frame.step.tel
    if isinstance(frame, (Step, AgentRun)):
        return frame.tel
    return None


def place_leaf(telemetry: Telemetry | None = None) -> Placement:
    """Placement of a generation, parse, validation, tool, memory, compaction or delegation span."""
    frame = current_frame()
    run, step, attempt = _chain(frame)
    tel = telemetry or frame_telemetry(frame) or get_telemetry()
    if frame is None:
        return Placement(tel, None)
    if step is not None and attempt is None:
        attempt = step.ensure_attempt()
    own = attempt.span if attempt is not None else (step.span if step is not None else run.span)  # type: ignore[union-attr]
    current = trace.get_current_span()
    ctx = current.get_span_context()
    frame_span = frame.span
    if ctx.is_valid and current is not frame_span and ctx.trace_id == own.get_span_context().trace_id:
        return Placement(tel, None, run, step, attempt)  # a more specific span of ours or the user's
    return Placement(tel, trace.set_span_in_context(own), run, step, attempt)
