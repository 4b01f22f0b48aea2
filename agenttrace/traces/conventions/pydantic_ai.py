"""pydantic-ai's native instrumentation. From version 3 of its format (the default since
pydantic-ai 1.0) it writes GenAI spans (`invoke_agent {name}`, `chat {model}`,
`execute_tool {tool}`) plus logfire and `pydantic_ai.*` keys; versions 1-2 wrote `agent run`,
`running tools` and `running tool`. A tool call whose arguments failed pydantic-ai's own
validation is an `execute_tool` span with `pydantic_ai.tool.failure_stage=validation`: the tool
never ran, so the attempt is a validation error (an invalid decision), not a tool error."""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, first_text
from agenttrace.traces.conventions.genai import agent_attributes, generation_attributes
from agenttrace.traces.span_records import SpanRecord

NAME = "pydantic-ai"
SCOPE = "pydantic-ai"
OLD_NAMES = {"agent run": sc.Segment.AGENT, "running tool": sc.Segment.TOOL}
GROUPING = "running tools"
NAMES = (*OLD_NAMES, GROUPING)  # the span names versions 1-2 wrote: the convention's without a key
GROUPING_REASON = "running tools: a grouping span; its tool calls are mapped, its own time counts as other"
NO_SEGMENT = "pydantic-ai span {name!r} with no segment (its time counts as other)"


def _is_pydantic_ai(span: SpanRecord) -> bool:
    if span.scope == SCOPE:
        return True
    a = span.attributes
    return span.name in NAMES or (sc.PAI_LOGFIRE_MSG in a and (
        sc.PAI_AGENT_NAME in a or any(k.startswith(sc.PAI_NAMESPACE) for k in a)))


def role(span: SpanRecord) -> SpanRole | None:
    if not _is_pydantic_ai(span):
        return None
    a = span.attributes
    op = a.get(sc.GEN_AI_OPERATION_NAME)
    segment = OLD_NAMES.get(span.name)
    if op in sc.GEN_AI_OPS_GENERATION:
        return SpanRole(NAME, sc.Segment.GENERATION, attributes=generation_attributes(a))
    if op == sc.OP_INVOKE_AGENT or segment == sc.Segment.AGENT:
        attrs = agent_attributes(span)
        attrs[sc.GEN_AI_AGENT_NAME] = first_text(a, sc.GEN_AI_AGENT_NAME, sc.PAI_AGENT_NAME) or attrs[sc.GEN_AI_AGENT_NAME]
        return SpanRole(NAME, sc.Segment.AGENT, attributes=attrs)
    if op == sc.OP_EXECUTE_TOOL or segment == sc.Segment.TOOL:
        attrs: dict[str, object] = {sc.GEN_AI_TOOL_NAME: first_text(a, sc.GEN_AI_TOOL_NAME) or span.name}
        if a.get(sc.PAI_TOOL_FAILURE_STAGE) == "validation" or a.get(sc.PAI_TOOL_RETRY_CAUSE) == "validation_error":
            attrs[sc.ERROR_TYPE] = sc.AttemptOutcome.VALIDATION_ERROR.value
        return SpanRole(NAME, sc.Segment.TOOL, attributes=attrs)
    if span.name == GROUPING:
        return SpanRole(NAME, None, GROUPING_REASON)
    return SpanRole(NAME, None, NO_SEGMENT.format(name=span.name))
