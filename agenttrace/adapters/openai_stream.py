"""One OpenAI chat-completions call as a generation span, and the stream wrappers around it.

`ChatCall` owns the span from request to response. For a stream the span stays open after
`create` returns and ends when the stream is exhausted, closed (`close()`, `with`), or abandoned
(the `for` loop broke: the iterator is finalised at once, the stream is closed and the span ends
with `agenttrace.stream.stopped_early=true`). Time to first chunk is the first chunk that carries
content or a tool-call delta. Recording never raises into the caller: failures are counted by the
telemetry's guard.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.adapters.replies import read_reply, usage_of
from agenttrace.core.decisions import is_cancellation
from agenttrace.instrument.frames import Placement, place_leaf
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.content import chat_input_messages, chat_output_messages

__all__ = ["AsyncTracedStream", "ChatCall", "TracedStream"]


@dataclass
class _Accumulated:
    """What the chunks of a stream added up to (choice 0's text; every choice's tool calls)."""

    text: list[str] = field(default_factory=list)
    calls: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    finish: dict[int, str] = field(default_factory=dict)

    def tool_calls(self) -> list[dict[str, Any]]:
        return [self.calls[k] for k in sorted(self.calls)]


class ChatCall:
    """The generation span of one `chat.completions.create` call."""

    def __init__(self, telemetry: Telemetry | None, model: str | None, provider: str | None,
                 attrs: Mapping[str, AttributeValue], messages: Any, *, kind: SpanKind = SpanKind.CLIENT) -> None:
        self.placement: Placement = place_leaf(telemetry)
        self.tel = self.placement.tel
        self.start_ns = self.tel.clock.now_ns()
        self.model = model or None
        self.span: Span = self.tel.start_span(sc.Segment.GENERATION, sc.generation_span_name(self.model), attrs, kind=kind,
            parent=self.placement.parent,
        )
        if self.placement.run is not None:
            self.placement.run.saw_model(self.model, provider)
        self.messages = messages
        self.first_chunk_ns: int | None = None
        self.acc = _Accumulated()
        self.ended = False

    def context(self) -> Any:
        return trace.set_span_in_context(self.span)

    # -- recording -----------------------------------------------------------------------------
    def response(self, completion: Any) -> None:
        """Attributes of a whole (non-streamed) reply, in any shape `read_reply` knows; ends the span."""
        self.tel.guard("recording a chat completion", self.record_reply, completion)
        self.end(None)

    def record_reply(self, completion: Any) -> None:
        reply = read_reply(completion)
        self._record_ids(reply.response_id, reply.model)
        self._record_tokens(reply.input_tokens, reply.output_tokens, reply.cached_input_tokens)
        self.span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, reply.finish_reasons)
        self._record_tool_calls(list(reply.tool_names))
        if self.tel.content.enabled and (reply.text is not None or reply.tool_calls):
            self.tel.content.record_messages(
                self.span, chat_input_messages(self.messages or []),
                chat_output_messages(reply.text, reply.finish_reasons[0] if reply.finish_reasons else None, reply.tool_calls),
            )

    def chunk(self, chunk: Any) -> None:
        self.tel.guard("recording a stream chunk", self._record_chunk, chunk)

    def _record_chunk(self, chunk: Any) -> None:
        self._record_ids(getattr(chunk, "id", None), getattr(chunk, "model", None))
        if getattr(chunk, "usage", None) is not None:
            self._record_tokens(*usage_of(chunk.usage))
        for choice in getattr(chunk, "choices", None) or []:
            delta = getattr(choice, "delta", None)
            content = getattr(delta, "content", None) if delta is not None else None
            deltas = (getattr(delta, "tool_calls", None) if delta is not None else None) or []
            if (content or deltas) and self.first_chunk_ns is None:
                self.first_chunk_ns = self.tel.clock.now_ns()
                self.span.set_attribute(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, (self.first_chunk_ns - self.start_ns) / 1e9)
            if content and choice.index == 0:
                self.acc.text.append(content)
            for d in deltas:
                entry = self.acc.calls.setdefault(
                    (choice.index, d.index), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if d.id:
                    entry["id"] = d.id
                fn = getattr(d, "function", None)
                if fn is not None:
                    entry["function"]["name"] += fn.name or ""
                    entry["function"]["arguments"] += fn.arguments or ""
            if choice.finish_reason:
                self.acc.finish[choice.index] = str(choice.finish_reason)

    def _record_ids(self, response_id: str | None, model: str | None) -> None:
        if response_id:
            self.span.set_attribute(sc.GEN_AI_RESPONSE_ID, response_id)
        if model:
            self.span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, model)
            if self.model is None:  # a call made without a model name: the response names the span
                self.model = model
                self.placement.named_by_response(self.span, model)

    def _record_tokens(self, input_tokens: int | None, output_tokens: int | None, cached: int | None) -> None:
        attrs: dict[str, AttributeValue] = {}
        for key, value in ((sc.GEN_AI_USAGE_INPUT_TOKENS, input_tokens), (sc.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens),
                           (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cached)):
            if value is not None:
                attrs[key] = value
        self.span.set_attributes(attrs)
        self.placement.usage(input_tokens, output_tokens)

    def _record_tool_calls(self, names: list[str | None]) -> None:
        self.span.set_attribute(sc.RESPONSE_TOOL_CALLS, len(names))
        if names:  # names the model wrote: a made-up one may be anything, so secrets are redacted
            self.span.set_attribute(sc.RESPONSE_TOOL_NAMES, tuple(self.tel.content.redact_text(n or "") for n in names))

    def _record_stream_end(self, stopped_early: bool) -> None:
        acc = self.acc
        self.span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, tuple(acc.finish[i] for i in sorted(acc.finish)))
        calls = acc.tool_calls()
        self._record_tool_calls([c["function"]["name"] for c in calls])
        if stopped_early:
            self.span.set_attribute(sc.STREAM_STOPPED_EARLY, True)
        if self.tel.content.enabled:
            self.tel.content.record_messages(
                self.span, chat_input_messages(self.messages or []),
                chat_output_messages("".join(acc.text), acc.finish.get(0), calls),
            )

    def end(self, exc: BaseException | None, *, stream_end: bool = False, stopped_early: bool = False) -> None:
        """End the span once (an exception marks it failed and the attempt errored)."""
        if self.ended:
            return
        self.ended = True
        if stream_end:
            self.tel.guard("recording a stream's end", self._record_stream_end, stopped_early)
        if exc is not None and not is_cancellation(exc):
            self.placement.note(error=True)
        self.tel.guard("ending a generation span", self.tel.end_span, self.span, exc)


class _StreamBase:
    def __init__(self, inner: Any, call: ChatCall | None, hide_usage_chunk: bool) -> None:
        self._inner = inner
        self._call = call
        self._hide_usage = hide_usage_chunk

    # what the chunks added up to, for the caller's next request and for validate_tool_calls
    @property
    def text(self) -> str:
        return "".join(self._call.acc.text) if self._call else ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The streamed tool calls, accumulated, in the OpenAI message format."""
        return self._call.acc.tool_calls() if self._call else []

    @property
    def finish_reasons(self) -> list[str]:
        return [self._call.acc.finish[i] for i in sorted(self._call.acc.finish)] if self._call else []

    def _seen(self, chunk: Any) -> bool:
        """Record the chunk; False for the usage-only chunk we asked for (the caller did not)."""
        if self._call is not None:
            self._call.chunk(chunk)
        return not (self._hide_usage and not getattr(chunk, "choices", None) and getattr(chunk, "usage", None) is not None)

    def _end(self, exc: BaseException | None, stopped_early: bool = False) -> None:
        if self._call is not None:
            self._call.end(exc, stream_end=True, stopped_early=stopped_early)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __del__(self) -> None:  # abandoned without reaching the end or being closed
        call = getattr(self, "_call", None)
        if call is not None and not call.ended:
            call.end(None, stream_end=True, stopped_early=True)


class TracedStream(_StreamBase):
    """An OpenAI `Stream` of chat completion chunks whose generation span ends with it."""

    def __iter__(self) -> Iterator[Any]:
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        finished = False
        try:
            for chunk in self._inner:
                if self._seen(chunk):
                    yield chunk
            finished = True
            self._end(None)
        except GeneratorExit:  # the caller stopped iterating: release the connection, end the span
            self._end(None, stopped_early=True)
            self._inner.close()
            raise
        except BaseException as exc:
            if not finished:
                self._end(exc)
            raise

    def __next__(self) -> Any:
        while True:
            try:
                chunk = next(self._inner)
            except StopIteration:
                self._end(None)
                raise
            except BaseException as exc:
                self._end(exc)
                raise
            if self._seen(chunk):
                return chunk

    def close(self) -> None:
        self._end(None, stopped_early=not (self._call is None or self._call.ended))
        self._inner.close()

    def __enter__(self) -> TracedStream:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self._end(exc)
        self.close()


class AsyncTracedStream(_StreamBase):
    """An OpenAI `AsyncStream` of chat completion chunks whose generation span ends with it."""

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        try:
            async for chunk in self._inner:
                if self._seen(chunk):
                    yield chunk
            self._end(None)
        except GeneratorExit:  # abandoned: asyncio finalises the generator soon after the break
            self._end(None, stopped_early=True)
            await self._inner.close()
            raise
        except BaseException as exc:
            self._end(exc)
            raise

    async def __anext__(self) -> Any:
        while True:
            try:
                chunk = await self._inner.__anext__()
            except StopAsyncIteration:
                self._end(None)
                raise
            except BaseException as exc:
                self._end(exc)
                raise
            if self._seen(chunk):
                return chunk

    async def close(self) -> None:
        self._end(None, stopped_early=not (self._call is None or self._call.ended))
        await self._inner.close()

    async def __aenter__(self) -> AsyncTracedStream:
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self._end(exc)
        await self.close()
