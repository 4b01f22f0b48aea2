"""OpenInference (Arize; Phoenix): `openinference.span.kind` names what a span is, `llm.*` and
`tool.*` keys carry the rest. Its LLM spans are INTERNAL (it wraps the client's request, not the
network call) and successful spans have status OK."""

from __future__ import annotations

import json

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, first_number, first_text
from agenttrace.traces.span_records import SpanRecord

NAME = "OpenInference"
SEGMENTS = {"AGENT": sc.Segment.AGENT, "LLM": sc.Segment.GENERATION, "TOOL": sc.Segment.TOOL,
             "RETRIEVER": sc.Segment.MEMORY}
LEFT_OUT = {
    "CHAIN": "CHAIN: a grouping span; its children are mapped, its own time counts as other",
    "EMBEDDING": "EMBEDDING: not a step of the agent loop (its time counts as other)",
    "RERANKER": "RERANKER: no segment of its own (its time counts as other)",
    "GUARDRAIL": "GUARDRAIL: no segment of its own (its time counts as other)",
    "EVALUATOR": "EVALUATOR: outside the agent loop",
    "PROMPT": "PROMPT: prompt templating (its time counts as other)",
}
UNKNOWN_KIND = "unknown OpenInference span kind {kind!r}"


def role(span: SpanRecord) -> SpanRole | None:
    a = span.attributes
    kind = a.get(sc.OI_SPAN_KIND)
    if not isinstance(kind, str):
        return None
    kind = kind.upper()
    segment = SEGMENTS.get(kind)
    if segment is None:
        return SpanRole(NAME, None, LEFT_OUT.get(kind) or UNKNOWN_KIND.format(kind=kind))
    attrs: dict[str, object] = {}
    if segment == sc.Segment.GENERATION:
        model = first_text(a, sc.OI_LLM_MODEL_NAME)
        provider = first_text(a, sc.OI_LLM_PROVIDER, sc.OI_LLM_SYSTEM)
        inp = first_number(a, sc.OI_LLM_TOKENS_PROMPT)
        out = first_number(a, sc.OI_LLM_TOKENS_COMPLETION)
        for key, value in ((sc.GEN_AI_REQUEST_MODEL, model), (sc.GEN_AI_PROVIDER_NAME, provider),
                           (sc.GEN_AI_USAGE_INPUT_TOKENS, None if inp is None else int(inp)),
                           (sc.GEN_AI_USAGE_OUTPUT_TOKENS, None if out is None else int(out))):
            if value is not None:
                attrs[key] = value
    elif segment == sc.Segment.TOOL:
        attrs[sc.GEN_AI_TOOL_NAME] = first_text(a, sc.OI_TOOL_NAME) or span.name
    elif segment == sc.Segment.AGENT:
        attrs[sc.GEN_AI_AGENT_NAME] = first_text(a, sc.OI_AGENT_NAME) or span.name
    return SpanRole(NAME, segment, attributes=attrs)


# -- what a model call's messages say about the calls before it --------------------------------
# OpenInference records a model call's messages flattened: `llm.output_messages.0.message.
# tool_calls.{i}.tool_call.{id,function.name,function.arguments}` for the calls it asked for, and
# `llm.input_messages.{i}...` for what it was sent, where some instrumentations (AutoGen's) put
# each tool result as a JSON object with its `call_id` and `is_error`, although the TOOL span
# itself is OK and holds only the output text.
_CALLS = "llm.output_messages.0.message.tool_calls."
_INPUTS = "llm.input_messages."


def tool_calls(gen: SpanRecord) -> list[tuple[str, str, str]]:
    """(call id, tool name, arguments text) of each tool call the model's reply asked for."""
    calls: dict[str, dict[str, str]] = {}
    for key, value in gen.attributes.items():
        if key.startswith(_CALLS) and isinstance(value, str):
            i, _, field = key[len(_CALLS):].partition(".")
            calls.setdefault(i, {})[field] = value
    out = []
    for i in sorted(calls, key=lambda x: int(x) if x.isdigit() else 0):
        c = calls[i]
        out.append((c.get("tool_call.id", ""), c.get("tool_call.function.name", ""), c.get("tool_call.function.arguments", "")))
    return out


def failed_call_ids(gen: SpanRecord) -> set[str]:
    """Ids of earlier tool calls whose results this model call was sent marked as errors."""
    failed: set[str] = set()
    for key, value in gen.attributes.items():
        if not (key.startswith(_INPUTS) and isinstance(value, str) and '"is_error"' in value):
            continue
        try:
            result = json.loads(value)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("is_error") is True and isinstance(result.get("call_id"), str):
            failed.add(result["call_id"])
    return failed
