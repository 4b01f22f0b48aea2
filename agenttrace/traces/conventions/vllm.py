"""A vLLM server's `llm_request` span (SERVER; vLLM's own tracing, joined to the caller's trace
through the `traceparent` header). Its `gen_ai.latency.*` attributes say how long the request
queued, prefilled and decoded on the server (float seconds; queue, prefill and decode are
measured on the engine's monotonic clock, e2e from arrival on the front end's wall clock, so
e2e also holds tokenizing, the hops between processes and detokenizing). agenttrace.traces.remote
splits the caller's generation by them."""

from __future__ import annotations

import json
from typing import Any

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, first_number, first_text
from agenttrace.traces.span_records import SpanRecord

NAME = "vLLM server"
LATENCIES = (sc.VLLM_TIME_IN_QUEUE, sc.VLLM_TIME_IN_PREFILL, sc.VLLM_TIME_IN_DECODE, sc.VLLM_E2E, sc.VLLM_TIME_TO_FIRST_TOKEN)


def role(span: SpanRecord) -> SpanRole | None:
    a = span.attributes
    if span.name != sc.VLLM_SPAN_NAME and not any(k in a for k in LATENCIES):
        return None
    attrs: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT}
    model = first_text(a, sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_REQUEST_MODEL)
    if model:
        attrs[sc.GEN_AI_REQUEST_MODEL] = model
    for ours, theirs in ((sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS),
                         (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS)):
        value = first_number(a, ours, theirs)
        if value is not None:
            attrs[ours] = int(value)
    prefill = first_number(a, sc.VLLM_TIME_IN_PREFILL)
    if prefill is not None and prefill >= 0:
        attrs[sc.SPEC_PREFILL_S] = float(prefill)
    reasons = a.get(sc.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, str) and reasons.startswith("["):  # vLLM writes the list as a JSON string
        try:
            attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [str(r) for r in json.loads(reasons)]
        except (ValueError, TypeError):
            pass
    return SpanRole(NAME, sc.Segment.GENERATION, attributes=attrs)


def latency_s(span: SpanRecord, key: str) -> float | None:
    """One of the `gen_ai.latency.*` values in seconds, None when absent or not a sane number."""
    value = first_number(span.attributes, key)
    return float(value) if value is not None and 0 <= value < 1e6 else None
