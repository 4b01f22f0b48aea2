"""Which instrumentation wrote a span, and what the span is in our terms (SPANS.md, "Traces from
other instrumentations").

One module per convention family; each has `role(span) -> SpanRole | None`, None when the span
is not of its convention. A role names the segment the span maps to, or none with the reason it
is left out, and the attributes of ours that its own attributes give (model, provider, tokens,
tool and agent names). `classify` asks them in order, most specific first: a vLLM server span
carries GenAI keys too, and OpenLLMetry's LLM spans now follow the GenAI conventions, so the
vendor's own marks decide before the generic ones.

    vllm.py           a vLLM server's `llm_request` span
    google_adk.py     Google ADK's own spans and OpenInference's of it (failures it turns into results)
    openinference.py  OpenInference (`openinference.span.kind`)
    openllmetry.py    OpenLLMetry / traceloop (`traceloop.span.kind`, `{vendor}.chat` spans)
    pydantic_ai.py    pydantic-ai's native spans (`agent run`, `running tool`, logfire keys)
    genai.py          the OpenTelemetry GenAI conventions (both attribute sets)
    client.py         HTTP, database and RPC client spans: network
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agenttrace import semconv as sc
from agenttrace.traces.span_records import SpanRecord

__all__ = ["AGENTTRACE", "SpanRole", "classify", "failed", "first_number", "first_text"]

AGENTTRACE = "agenttrace"  # the convention of our own spans (they carry agenttrace.segment)


@dataclass(frozen=True, slots=True)
class SpanRole:
    """What a span of another instrumentation is: its `segment` (None: left out, for `reason`),
    the convention and the attribute set (`variant`) it was recognised by, and `attributes`,
    keys of ours derived from its own (added where the span lacks them)."""

    convention: str
    segment: str | None
    reason: str = ""
    variant: str = ""
    attributes: Mapping[str, Any] = field(default_factory=dict)


def failed(span: SpanRecord) -> bool:
    """The operation failed: status ERROR, as every convention here records a failure, or an
    `error.type` (which the conventions set only on failure; a role sets it where a span says
    its failure only in its result)."""
    return span.status == "ERROR" or bool(span.attributes.get(sc.ERROR_TYPE))


def first_text(attrs: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def first_number(attrs: Mapping[str, Any], *keys: str) -> int | float | None:
    """The first of `keys` holding a finite number (bools are not numbers here)."""
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < 1e18:
            return value
    return None


def _registry() -> list[Callable[[SpanRecord], SpanRole | None]]:
    from agenttrace.traces.conventions import client, genai, google_adk, openinference, openllmetry, pydantic_ai, vllm

    return [vllm.role, google_adk.role, openinference.role, openllmetry.role, pydantic_ai.role, genai.role, client.role]


_ROLES: list[Callable[[SpanRecord], SpanRole | None]] = []


def classify(span: SpanRecord) -> SpanRole | None:
    """The role of a span that is not ours, by the first convention that recognises it; None
    when none does."""
    if not _ROLES:  # filled in one step: two threads classifying at once fill it once
        _ROLES[:] = _registry()
    for role in _ROLES:
        found = role(span)
        if found is not None:
            return found
    return None
