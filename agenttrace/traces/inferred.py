"""The names of what the reading of another instrumentation's trace infers rather than reads
(SPANS.md, "Traces from other instrumentations"): the values of `agenttrace.inferred` on the
spans it changes or makes, which the report lists per task and per input as they are."""

from __future__ import annotations

STEPS = "steps and attempts"
RETRIES = "retries"
DECISIONS = "decision moments (TTVTC)"
VALIDITY = "attempt validity"
OUTCOME = "task outcome"
TASK = "task boundary"
ATTEMPT_BOUNDS = "attempt boundaries"
CALL_BOUNDS = "model call boundaries"
TOOL_FAILURES = "tool failures (from the next model call's input)"
PARENTS = "lost parents (a childless span enclosing a sibling)"
INFERRED_FIGURES = (TASK, STEPS, RETRIES, DECISIONS, VALIDITY, OUTCOME, ATTEMPT_BOUNDS, CALL_BOUNDS, TOOL_FAILURES, PARENTS)
