"""The OpenTelemetry GenAI conventions, as the official instrumentations write them
(`opentelemetry-instrumentation-openai-v2`, `opentelemetry-util-genai`) and as frameworks that
follow them do.

Two attribute sets are in use: the one before semantic conventions v1.37 (`gen_ai.system`; what
openai-v2 writes by default with util-genai 0.4) and the current one (`gen_ai.provider.name`;
what util-genai 1.x always writes, whatever `OTEL_SEMCONV_STABILITY_OPT_IN` says, and what
`gen_ai_latest_experimental` selects). Both carry `gen_ai.operation.name`, which decides the role.
Token counts use `gen_ai.usage.input_tokens` in both; the names before v1.27
(`prompt_tokens` / `completion_tokens`) are read too.
"""

from __future__ import annotations

from typing import Any

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, first_number, first_text
from agenttrace.traces.span_records import SpanRecord

NAME = "OpenTelemetry GenAI"
CURRENT = f"{sc.GEN_AI_PROVIDER_NAME} (v1.37+, gen_ai_latest_experimental)"
BEFORE_1_37 = f"{sc.GEN_AI_SYSTEM} (before v1.37)"
LEFT_OUT = {
    "embeddings": "embeddings: not a step of the agent loop (their time counts as other)",
    "create_agent": "agent creation: outside any run",
    "plan": "planning span: its own time counts as other, its children are mapped",
}
NO_OPERATION = "GenAI attributes but no gen_ai.operation.name"
UNKNOWN_OPERATION = "unknown GenAI operation {op!r} (a newer convention version?)"


def _variant(a: dict[str, Any]) -> str:
    if sc.GEN_AI_PROVIDER_NAME in a:
        return CURRENT
    return BEFORE_1_37 if sc.GEN_AI_SYSTEM in a else ""


def generation_attributes(a: dict[str, Any]) -> dict[str, Any]:
    """Our keys from a GenAI inference span: the provider and the token counts under the names
    the reports read, from whichever set the span uses."""
    out: dict[str, Any] = {}
    provider = first_text(a, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM)
    if provider:
        out[sc.GEN_AI_PROVIDER_NAME] = provider
    inp = first_number(a, sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS)
    out_tokens = first_number(a, sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS)
    if inp is not None:
        out[sc.GEN_AI_USAGE_INPUT_TOKENS] = int(inp)
    if out_tokens is not None:
        out[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = int(out_tokens)
    model = first_text(a, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL)
    if model:
        out[sc.GEN_AI_REQUEST_MODEL] = model
    return out


def agent_attributes(span: SpanRecord, name_prefix: str = sc.OP_INVOKE_AGENT) -> dict[str, Any]:
    a = span.attributes
    out: dict[str, Any] = {}
    name = first_text(a, sc.GEN_AI_AGENT_NAME) or span.name.removeprefix(name_prefix).strip() or span.name
    out[sc.GEN_AI_AGENT_NAME] = name
    conversation = first_text(a, sc.GEN_AI_CONVERSATION_ID)
    if conversation:
        out[sc.TASK_ID] = conversation
    return out


def role(span: SpanRecord) -> SpanRole | None:
    a = span.attributes
    op = a.get(sc.GEN_AI_OPERATION_NAME)
    if not isinstance(op, str):
        if any(k.startswith(sc.GEN_AI_NAMESPACE) for k in a):
            return SpanRole(NAME, None, NO_OPERATION, _variant(a))
        return None
    variant = _variant(a)
    if op in sc.GEN_AI_OPS_GENERATION:
        return SpanRole(NAME, sc.Segment.GENERATION, variant=variant, attributes=generation_attributes(a))
    if op == sc.OP_EXECUTE_TOOL:
        tool = first_text(a, sc.GEN_AI_TOOL_NAME) or span.name.removeprefix(sc.OP_EXECUTE_TOOL).strip()
        return SpanRole(NAME, sc.Segment.TOOL, variant=variant, attributes={sc.GEN_AI_TOOL_NAME: tool})
    if op in (sc.OP_INVOKE_AGENT, sc.OP_INVOKE_WORKFLOW):
        return SpanRole(NAME, sc.Segment.AGENT, variant=variant, attributes=agent_attributes(span, op))
    if op in sc.GEN_AI_OPS_MEMORY:
        return SpanRole(NAME, sc.Segment.MEMORY, variant=variant)
    reason = LEFT_OUT.get(op) or UNKNOWN_OPERATION.format(op=op)
    return SpanRole(NAME, None, reason, variant)
