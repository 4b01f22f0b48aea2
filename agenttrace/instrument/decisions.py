"""The decision table: the one place attempt and step outcomes are named (SPANS.md, outcomes).

Our own loop (`runtime/agent.py`), every wrapped agent's frames (`frames.py`) and the server's
parse span take their outcomes from here: what an exception that ended an attempt means, what the
spans recorded inside an attempt imply, and what a step's last attempt makes of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from agenttrace import semconv as sc
from agenttrace.errors import ArgumentsInvalid, ModelMistake, ParseError, ToolFailed, is_cancellation

__all__ = ["Flags", "attempt_outcome", "is_cancellation", "step_outcome"]

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
