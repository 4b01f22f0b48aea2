"""The decision table: the one place attempt and step outcomes are named (SPANS.md, outcomes).

Our own loop (`runtime/agent.py`), every wrapped agent's frames (`frames.py`) and the server's
parse span take their outcomes from here: what an exception that ended an attempt means, what the
spans recorded inside an attempt imply, and what a step's last attempt makes of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from agenttrace import semconv as sc
from agenttrace.errors import ArgumentsInvalid, ModelMistake, ParseError, ToolFailed, is_cancellation

__all__ = ["Flags", "attempt_outcome", "is_cancellation", "is_retried", "step_outcome", "task_after_step", "task_outcome"]

Outcome = sc.AttemptOutcome


@dataclass
class Flags:
    """What the spans recorded inside an attempt (or a step) said about its decision."""

    final_answer: bool = False
    valid_call: bool = False
    tool_ok: bool = False
    parse_error: bool = False
    validation_error: bool = False
    tool_error: bool = False
    timeout: bool = False
    error: bool = False

    def outcome(self) -> sc.AttemptOutcome:
        for flag, outcome in (
            (self.parse_error, Outcome.PARSE_ERROR),
            (self.validation_error, Outcome.VALIDATION_ERROR),
            (self.timeout, Outcome.TIMEOUT),
            (self.tool_error, Outcome.TOOL_ERROR),
            (self.error, Outcome.ERROR),
        ):
            if flag:
                return outcome
        return Outcome.OK


_STEP_FAILURE = {
    Outcome.PARSE_ERROR: sc.StepOutcome.INVALID,
    Outcome.VALIDATION_ERROR: sc.StepOutcome.INVALID,
    Outcome.TOOL_ERROR: sc.StepOutcome.ERROR,
    Outcome.TIMEOUT: sc.StepOutcome.ERROR,
    Outcome.ERROR: sc.StepOutcome.ERROR,
    Outcome.CANCELLED: sc.StepOutcome.CANCELLED,
}


def attempt_outcome(exc: BaseException) -> sc.AttemptOutcome:
    """The outcome of an attempt that an exception ended: a model mistake names its kind (a
    tool that timed out is `timeout`), cancellation is `cancelled`, anything else `error`."""
    if is_cancellation(exc):
        return Outcome.CANCELLED
    if isinstance(exc, ParseError):
        return Outcome.PARSE_ERROR
    if isinstance(exc, ArgumentsInvalid):
        return Outcome.VALIDATION_ERROR
    if isinstance(exc, ToolFailed):
        return Outcome.TIMEOUT if exc.timed_out else Outcome.TOOL_ERROR
    if isinstance(exc, TimeoutError):
        return Outcome.TIMEOUT
    if isinstance(exc, ModelMistake):
        return Outcome.TOOL_ERROR
    return Outcome.ERROR


def step_outcome(last: sc.AttemptOutcome, *, final_answer: bool = False, decided: bool = True) -> sc.StepOutcome:
    """A step's outcome from its last attempt: a held decision is `final_answer` or `tool_call`
    (`invalid` when the attempt held none), a failed one `invalid`, `error` or `cancelled`."""
    if last is not Outcome.OK:
        return _STEP_FAILURE[last]
    if final_answer:
        return sc.StepOutcome.FINAL_ANSWER
    return sc.StepOutcome.TOOL_CALL if decided else sc.StepOutcome.INVALID


def is_retried(previous: sc.AttemptOutcome) -> bool:
    """Whether the attempt after one that ended `previous` retries the same step: a failed
    attempt is tried again (the model sees what was wrong), a held decision or a cancellation
    ends the step. Our loop and the reading of other instrumentations' traces both ask this, so
    a retry means the same thing whoever wrote the spans."""
    return previous not in (Outcome.OK, Outcome.CANCELLED)


def task_after_step(step: sc.StepOutcome, *, loop: bool = False, out_of_time: bool = False) -> sc.TaskOutcome | None:
    """What a step's outcome makes of its task in our loop, as it runs: None while the task goes
    on (a tool call with time left). A repeated call ends it as a loop, a final answer completes
    it, a step that decided nothing fails it (out of budget when its time ran out)."""
    if loop:
        return sc.TaskOutcome.LOOP_DETECTED
    if step is sc.StepOutcome.FINAL_ANSWER:
        return sc.TaskOutcome.COMPLETED
    if step is sc.StepOutcome.CANCELLED:
        return sc.TaskOutcome.CANCELLED
    if step is not sc.StepOutcome.TOOL_CALL or out_of_time:
        return sc.TaskOutcome.BUDGET_EXHAUSTED if out_of_time else sc.TaskOutcome.FAILED
    return None


def task_outcome(*, failed: bool, cancelled: bool = False, final_answers: int, steps: int,
                 last_step: sc.StepOutcome | None, after_tool_call: sc.TaskOutcome | None) -> sc.TaskOutcome | None:
    """A task's outcome from how its run ended and what its steps decided: an exception (or a
    failed agent span) fails it, a final answer completes it, a last step that failed fails it.
    A run that ended after a tool call is `after_tool_call`: our wrappers know the budget ran
    out (`budget_exhausted`); another instrumentation's trace does not say (None: unknown). A run
    of no step is `completed` for our wrappers (nothing was asked of it) and unknown otherwise."""
    if cancelled:
        return sc.TaskOutcome.CANCELLED
    if failed:
        return sc.TaskOutcome.FAILED
    if final_answers:
        return sc.TaskOutcome.COMPLETED
    if last_step in (sc.StepOutcome.INVALID, sc.StepOutcome.ERROR):
        return sc.TaskOutcome.FAILED
    if last_step is sc.StepOutcome.CANCELLED:
        return sc.TaskOutcome.CANCELLED
    if not steps:
        return sc.TaskOutcome.COMPLETED if after_tool_call is sc.TaskOutcome.BUDGET_EXHAUSTED else None
    return after_tool_call
