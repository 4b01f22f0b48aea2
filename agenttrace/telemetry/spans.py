"""The span context manager every instrumented stage goes through.

Times come from the injected clock, not from the SDK's own `time_ns`, so a fake clock gives
exact spans in tests and every segment shares one time base. An exception leaving the block
marks the span ERROR with `error.type` (the mistake's kind for model mistakes, `cancelled` for
cancellation) and propagates unchanged: recording never swallows the agent's control flow.
The status message comes from the content policy (`ContentPolicy.describe_error`): with capture
off it names the error's kind and where, never the values in its message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.clock import Clock
from agenttrace.errors import ModelMistake, is_cancellation
from agenttrace.telemetry.content import CONTENT_OFF, ContentPolicy


def error_type(exc: BaseException) -> str:
    """The `error.type` value for an exception."""
    if is_cancellation(exc):
        return sc.ERROR_CANCELLED
    if isinstance(exc, ModelMistake):
        return exc.error_type
    return type(exc).__qualname__


def mark_error(span: Span, kind: str, message: str) -> None:
    """Status ERROR with a message and `error.type`, as SPANS.md asks of every failed span.

    `message` goes to the trace as given: it must be our own wording or come from a
    `ContentPolicy` (`describe_error`, `status_text`), never an exception's text as such."""
    span.set_attribute(sc.ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, message))


def start_span(
    tracer: trace.Tracer,
    clock: Clock,
    segment: str,
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Context | None = None,
    links: Sequence[Link] = (),
) -> Span:
    """A started (not current) span at `clock.now_ns()`; `parent` None means the current context."""
    attrs: dict[str, AttributeValue] = {sc.SEGMENT: segment}
    if attributes:
        attrs.update(attributes)
    return tracer.start_span(name, context=parent, kind=kind, attributes=attrs, links=links or None,
                             start_time=clock.now_ns())


def end_span(span: Span, clock: Clock, exc: BaseException | None = None, content: ContentPolicy | None = None) -> None:
    """Mark a failure (error.type, status ERROR; `cancelled` for cancellation) and end on the clock.
    The status message is `content.describe_error(exc)` (no policy: as with capture off)."""
    if exc is not None:
        mark_error(span, error_type(exc), (content or CONTENT_OFF).describe_error(exc))
    span.end(end_time=clock.now_ns())


@contextmanager
def open_span(
    tracer: trace.Tracer,
    clock: Clock,
    segment: str,
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    content: ContentPolicy | None = None,
) -> Iterator[Span]:
    """Start a span as the current one at `clock.now_ns()`; end it at exit, on the same clock
    (a failure's status message through `content`, as in `end_span`)."""
    span = start_span(tracer, clock, segment, name, attributes, kind=kind)
    token = otel_context.attach(trace.set_span_in_context(span))
    failure: BaseException | None = None
    try:
        yield span
    except BaseException as exc:
        failure = exc
        raise
    finally:
        otel_context.detach(token)
        end_span(span, clock, failure, content)


def child_span(
    tracer: trace.Tracer,
    parent: Span,
    segment: str,
    name: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> None:
    """Record a finished child of `parent` from measured times (prefill, draft, verify)."""
    attrs: dict[str, AttributeValue] = {sc.SEGMENT: segment}
    if attributes:
        attrs.update(attributes)
    span = tracer.start_span(name, context=trace.set_span_in_context(parent), attributes=attrs, start_time=start_ns)
    span.end(end_time=end_ns)


def tool_attributes(name: str, *, call_id: str | None = None, tool_type: str = sc.TOOL_TYPE_FUNCTION,
                    description: str | None = None) -> dict[str, AttributeValue]:
    """The `execute_tool` span's attributes (SPANS.md). No call id is made up when the model gave
    none: `gen_ai.tool.call.id` names the model's call, so an invented one would mislead."""
    attrs: dict[str, AttributeValue] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: name,
        sc.GEN_AI_TOOL_TYPE: tool_type,
    }
    if call_id:
        attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id
    if description:
        attrs[sc.GEN_AI_TOOL_DESCRIPTION] = description
    return attrs
