"""Tracing agents users already have: decorators and context managers that write the same spans
as our own loop, so `agenttrace report` gives a wrapped agent the same per-segment breakdown,
time to valid tool call and decision throughput.

    config.py       configure(): the telemetry wrapped agents record into
    frames.py       where the next span goes (run, step, attempt)
    scope.py        the scope machinery: `with`, `async with` and decorators
    structure.py    agent_span, delegation_span, step_span, attempt_span, turn_span
    model_spans.py  generation_span, traced_model
    operations.py   parse_span / final_answer, tool_span, memory_span, compaction_span
    validation.py   validate_tool_call(s), validation_span
    propagation.py  propagate, PropagatingExecutor (context into thread pools)

Every scope works as `with`, `async with` and as a decorator of sync or async functions, and never
raises a telemetry failure into the agent.
"""

from agenttrace.instrument.config import configure, get_telemetry, shutdown
from agenttrace.instrument.frames import AgentRun, Attempt, Step
from agenttrace.instrument.model_spans import generation_span, traced_model
from agenttrace.instrument.operations import compaction_span, final_answer, memory_span, parse_span, tool_span
from agenttrace.instrument.propagation import PropagatingExecutor, propagate
from agenttrace.instrument.structure import (
    agent_span,
    attempt_span,
    current_run,
    current_step,
    delegation_span,
    step_span,
    turn_span,
)
from agenttrace.instrument.validation import ValidationResult, validate_tool_call, validate_tool_calls, validation_span

__all__ = [
    "AgentRun",
    "Attempt",
    "PropagatingExecutor",
    "Step",
    "ValidationResult",
    "agent_span",
    "attempt_span",
    "compaction_span",
    "configure",
    "current_run",
    "current_step",
    "delegation_span",
    "final_answer",
    "generation_span",
    "get_telemetry",
    "memory_span",
    "parse_span",
    "propagate",
    "shutdown",
    "step_span",
    "tool_span",
    "traced_model",
    "turn_span",
    "validate_tool_call",
    "validate_tool_calls",
    "validation_span",
]
