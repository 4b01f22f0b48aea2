"""OpenLLMetry (traceloop): its decorators write `{name}.{kind}` spans with `traceloop.span.kind`
(workflow, agent, task, tool) and `traceloop.entity.name`; its instrumentations write LLM spans
named `{vendor}.{operation}` (`openai.chat`), which since 0.55 follow the GenAI conventions
(before: `llm.request.type`, `gen_ai.system`, `gen_ai.usage.prompt_tokens`, `llm.usage.*`)."""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, first_text
from agenttrace.traces.conventions.genai import generation_attributes
from agenttrace.traces.span_records import SpanRecord

NAME = "OpenLLMetry"
KINDS = {"workflow": sc.Segment.AGENT, "agent": sc.Segment.AGENT, "tool": sc.Segment.TOOL}
LEFT_OUT = {"task": "task: a grouping span; its children are mapped, its own time counts as other"}
# Keys only traceloop's instrumentations write on their LLM spans.
LLM_MARKS = (sc.TL_LLM_REQUEST_TYPE, sc.TL_GEN_AI_IS_STREAMING, sc.TL_LLM_IS_STREAMING, sc.TL_OPENAI_API_BASE,
              sc.TL_LLM_USAGE_TOTAL_TOKENS)
LLM_OPS = {"chat", "completion", "completions", "messages", "generate_content", "text_completion"}
SCOPE_SUFFIX = ".v1"  # its instrumentations' scopes (`opentelemetry.instrumentation.openai.v1`)
UNKNOWN_KIND = "unknown traceloop.span.kind {kind!r}"
EMBEDDINGS = "embeddings: not a step of the agent loop (their time counts as other)"
LLM_VARIANT = "traceloop instrumentation"


def _is_llm_span(span: SpanRecord) -> bool:
    a = span.attributes
    if any(k in a for k in LLM_MARKS):
        return True
    vendor, _, op = span.name.partition(".")
    return bool(vendor) and op in LLM_OPS and span.scope.endswith(SCOPE_SUFFIX)


def role(span: SpanRecord) -> SpanRole | None:
    a = span.attributes
    kind = a.get(sc.TL_SPAN_KIND)
    if isinstance(kind, str):
        segment = KINDS.get(kind)
        if segment is None:
            return SpanRole(NAME, None, LEFT_OUT.get(kind) or UNKNOWN_KIND.format(kind=kind))
        name = first_text(a, sc.TL_ENTITY_NAME) or span.name.rsplit(".", 1)[0]
        key = sc.GEN_AI_TOOL_NAME if segment == sc.Segment.TOOL else sc.GEN_AI_AGENT_NAME
        return SpanRole(NAME, segment, attributes={key: name})
    if not _is_llm_span(span):
        return None
    request_type = a.get(sc.TL_LLM_REQUEST_TYPE)
    if request_type == "embedding" or span.name.endswith(".embeddings"):
        return SpanRole(NAME, None, EMBEDDINGS)
    return SpanRole(NAME, sc.Segment.GENERATION, variant=LLM_VARIANT, attributes=generation_attributes(a))
