"""OpenInference (Arize; Phoenix): `openinference.span.kind` names what a span is, `llm.*` and
`tool.*` keys carry the rest. Its LLM spans are INTERNAL (it wraps the client's request, not the
network call) and successful spans have status OK."""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, first_number, first_text
from agenttrace.traces.records import SpanRecord

NAME = "OpenInference"
_SEGMENTS = {"AGENT": sc.Segment.AGENT, "LLM": sc.Segment.GENERATION, "TOOL": sc.Segment.TOOL,
             "RETRIEVER": sc.Segment.MEMORY}
_LEFT_OUT = {
    "CHAIN": "CHAIN: a grouping span; its children are mapped, its own time counts as other",
    "EMBEDDING": "EMBEDDING: not a step of the agent loop (its time counts as other)",
    "RERANKER": "RERANKER: no segment of its own (its time counts as other)",
    "GUARDRAIL": "GUARDRAIL: no segment of its own (its time counts as other)",
    "EVALUATOR": "EVALUATOR: outside the agent loop",
    "PROMPT": "PROMPT: prompt templating (its time counts as other)",
}


def role(span: SpanRecord) -> SpanRole | None:
    a = span.attributes
    kind = a.get(sc.OI_SPAN_KIND)
    if not isinstance(kind, str):
        return None
    kind = kind.upper()
    segment = _SEGMENTS.get(kind)
    if segment is None:
        return SpanRole(NAME, None, _LEFT_OUT.get(kind) or f"unknown OpenInference span kind {kind!r}")
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
