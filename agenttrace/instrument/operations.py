"""What happens inside a wrapped agent's attempt: generation, parse, tool, memory and compaction
spans, each as a context manager (and decorator) with a small handle to record results."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.core.decisions import is_cancellation
from agenttrace.instrument.frames import Frame, Placement, place_leaf
from agenttrace.instrument.scope import Scope
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.spans import tool_attributes

__all__ = [
    "CompactionHandle",
    "MemoryHandle",
    "ParseHandle",
    "ToolHandle",
    "compaction_span",
    "final_answer",
    "memory_span",
    "parse_span",
    "tool_span",
]


class Handle:
    """Base of the handles: the span, its placement, and a guard so recording never raises."""

    def __init__(self, placement: Placement, span: Span) -> None:
        self.placement = placement
        self.span = span

    @property
    def telemetry(self) -> Telemetry:
        return self.placement.tel

    def _guard(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.placement.tel.guard(what, fn, *args, **kwargs)


class LeafScope(Scope[Any]):
    """A span placed under the current attempt (or the innermost span of ours)."""

    handle_type: type[Handle] = Handle

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        raise NotImplementedError

    def _open(self) -> tuple[Any, Telemetry, Span, Frame | None]:
        placement = place_leaf(self._kwargs.get("telemetry"))
        segment, name, attrs, kind = self._describe()
        span = placement.tel.start_span(segment, name, attrs, kind=kind, parent=placement.parent)
        return self._handle(placement, span), placement.tel, span, None

    def _handle(self, placement: Placement, span: Span) -> Any:
        return self.handle_type(placement, span)

    def _close(self, handle: Any, exc: BaseException | None) -> None:
        self._finish(handle, exc)
        handle.placement.tel.end_span(handle.span, exc)

    def _finish(self, handle: Any, exc: BaseException | None) -> None:
        if exc is not None:
            handle.placement.note(error=not is_cancellation(exc))


# -- parse ----------------------------------------------------------------------------------------
class ParseHandle(Handle):
    """Say what the parse produced: `tool_call()` or `final_answer()`. A parse that ends with
    an exception, or with neither, is a failed parse (an invalid decision)."""

    result: str | None = None
    error_type: str = "parse_error"

    def tool_call(self, name: str | None = None) -> None:
        self.result = "tool_call"

    def final_answer(self, text: str | None = None) -> None:
        self.result = "final_answer"

    def correct(self, value: bool) -> None:
        """Whether the final answer is what the task expected (`agenttrace.decision.correct`,
        which the time-to-correct-action figure reads)."""
        self.span.set_attribute(sc.DECISION_CORRECT, bool(value))

    def failed(self, error_type: str = "parse_error") -> None:
        """The output held no usable decision; `error_type` names why (e.g. `invalid_json`).
        The attempt counts as a parse error from now on (so a `step.retry()` inside the
        block already knows why)."""
        self.result = None
        self.error_type = error_type
        self.placement.note(parse_error=True)


class parse_span(LeafScope):  # noqa: N801
    """Reading a decision out of model output: `parse_tool_call` (segment parse). A final answer
    recorded here is the step's decision moment (SPANS.md: TTVTC of a final-answer step)."""

    handle_type = ParseHandle

    def __init__(self, *, telemetry: Telemetry | None = None) -> None:
        super().__init__(telemetry=telemetry)

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        return sc.Segment.PARSE, sc.SPAN_PARSE, {}, SpanKind.INTERNAL

    def _finish(self, handle: ParseHandle, exc: BaseException | None) -> None:
        from agenttrace.telemetry.spans import mark_error

        p = handle.placement
        if exc is not None and is_cancellation(exc):
            return
        ok = exc is None and handle.result is not None
        handle.span.set_attribute(sc.PARSE_OK, ok)
        if ok:
            handle.span.set_attribute(sc.PARSE_RESULT, handle.result)  # type: ignore[arg-type]
            if handle.result == "final_answer":
                p.note(final_answer=True)
                if p.run is not None:
                    p.run.count(valid=1, final=1)
            return
        p.note(parse_error=True)
        if p.run is not None:
            p.run.count(invalid=1)
        if exc is None:
            mark_error(handle.span, handle.error_type, "no decision could be read from the output")


def final_answer(text: str | None = None, *, telemetry: Telemetry | None = None) -> None:
    """Record that the model's reply is the final answer: the step's decision, at this moment.

    For loops that need no parsing (an OpenAI reply without tool calls is the answer), this is
    a `parse_tool_call` span of (near) zero length with `agenttrace.parse.result=final_answer`.
    """
    with parse_span(telemetry=telemetry) as p:
        if p is not None:
            p.final_answer(text)


# -- tool -----------------------------------------------------------------------------------------
class ToolHandle(Handle):
    """`result(value)` records the tool's result when content capture is on."""

    arguments: Any = None

    def result(self, value: Any) -> None:
        self._guard("recording content", self.placement.tel.content.record_tool_call, self.span, None, value)


class tool_span(LeafScope):  # noqa: N801
    """A tool's execution: `execute_tool {name}` (segment tool). The caller's exception marks it
    failed (error.type, status ERROR) and passes through. `call_id` (`gen_ai.tool.call.id`) is
    the model's id for the call, recorded only when there is one; `description` is the tool's
    (`gen_ai.tool.description`). `arguments` are recorded only when content capture is on."""

    handle_type = ToolHandle

    def __init__(
        self,
        name: str,
        *,
        call_id: str | None = None,
        tool_type: str = sc.TOOL_TYPE_FUNCTION,
        description: str | None = None,
        arguments: Any = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        super().__init__(name, call_id=call_id, tool_type=tool_type, description=description, arguments=arguments,
                         telemetry=telemetry)

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        name, kw = self._args[0], self._kwargs
        attrs = tool_attributes(name, call_id=kw["call_id"], tool_type=kw["tool_type"], description=kw["description"])
        return sc.Segment.TOOL, sc.tool_span_name(name), attrs, SpanKind.INTERNAL

    def _open(self) -> tuple[Any, Telemetry, Span, Frame | None]:
        handle, tel, span, frame = super()._open()
        if self._kwargs["arguments"] is not None:
            handle._guard("recording content", tel.content.record_tool_call, span, self._kwargs["arguments"], None)
        return handle, tel, span, frame

    def _finish(self, handle: ToolHandle, exc: BaseException | None) -> None:
        if exc is None:
            handle.placement.note(tool_ok=True)
        elif isinstance(exc, TimeoutError):
            handle.placement.note(timeout=True)
        elif not is_cancellation(exc):
            handle.placement.note(tool_error=True)


# -- memory and compaction ------------------------------------------------------------------------
class MemoryHandle(Handle):
    def items(self, count: int) -> None:
        """How many memory items were found (search) or written (create)."""
        self.span.set_attribute(sc.MEMORY_ITEMS, int(count))

    def record(self, items: int, *, bytes: int | None = None, store_s: float | None = None,
               store: str | None = None) -> None:
        """What the store did: items found or written, their text's bytes, the store's own time
        inside the call (s) and its engine (e.g. `sqlite-fts5`)."""
        attrs: dict[str, AttributeValue] = {sc.MEMORY_ITEMS: int(items)}
        for key, value in ((sc.MEMORY_BYTES, bytes), (sc.MEMORY_STORE_S, store_s), (sc.MEMORY_STORE, store)):
            if value is not None:
                attrs[key] = value
        self.span.set_attributes(attrs)

    def failed(self, error_type: str, message: str) -> None:
        """The store could not be used; the caller goes on without it. Marks this span failed
        (error.type, status ERROR) and nothing else: the attempt around it is not failed."""
        from agenttrace.telemetry.spans import mark_error

        mark_error(self.span, error_type, message)


class memory_span(LeafScope):  # noqa: N801
    """A memory operation: `search_memory` or `create_memory` (segment memory)."""

    handle_type = MemoryHandle

    def __init__(self, operation: str = sc.OP_SEARCH_MEMORY, *, items: int | None = None, telemetry: Telemetry | None = None) -> None:
        if operation in ("search", "create"):
            operation = f"{operation}_memory"
        if operation not in (sc.OP_SEARCH_MEMORY, sc.OP_CREATE_MEMORY):
            raise ValueError(f"memory operation must be 'search_memory' or 'create_memory', got {operation!r}")
        super().__init__(operation, items=items, telemetry=telemetry)

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        op = self._args[0]
        attrs: dict[str, AttributeValue] = {sc.GEN_AI_OPERATION_NAME: op}
        if self._kwargs["items"] is not None:
            attrs[sc.MEMORY_ITEMS] = int(self._kwargs["items"])
        return sc.Segment.MEMORY, sc.memory_span_name(op), attrs, SpanKind.INTERNAL


class CompactionHandle(Handle):
    def tokens_after(self, count: int) -> None:
        self.span.set_attribute(sc.COMPACTION_TOKENS_AFTER, int(count))


class compaction_span(LeafScope):  # noqa: N801
    """Shrinking the context: `compact_context` (segment compaction), tokens before and after."""

    handle_type = CompactionHandle

    def __init__(self, *, tokens_before: int, tokens_after: int | None = None, telemetry: Telemetry | None = None) -> None:
        super().__init__(tokens_before=tokens_before, tokens_after=tokens_after, telemetry=telemetry)

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        attrs: dict[str, AttributeValue] = {sc.COMPACTION_TOKENS_BEFORE: int(self._kwargs["tokens_before"])}
        if self._kwargs["tokens_after"] is not None:
            attrs[sc.COMPACTION_TOKENS_AFTER] = int(self._kwargs["tokens_after"])
        return sc.Segment.COMPACTION, sc.SPAN_COMPACTION, attrs, SpanKind.INTERNAL
