"""Model calls inside a wrapped agent: `generation_span` (a context manager and decorator with
a handle to record usage, timing and the response) and `traced_model`, which makes any
`ChatModel` record each call as one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.core.chat import CancelToken, ChatModel, ChatModelWrapper, Generation, GenerationParams, Message
from agenttrace.instrument.frames import Placement
from agenttrace.instrument.operations import Handle, LeafScope
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.generation_attributes import record_chat_content, record_generation, request_attributes

__all__ = ["GenerationHandle", "generation_span", "traced_model"]


class GenerationHandle(Handle):
    """Record what a model call returned. Every method is optional and never raises."""

    def __init__(self, placement: Placement, span: Span, operation: str = sc.OP_CHAT, model: str | None = None) -> None:
        super().__init__(placement, span)
        self.start_ns = placement.tel.clock.now_ns()
        self.first_chunk_ns: int | None = None
        self.operation, self.model = operation, model

    def first_chunk(self) -> None:
        """Mark now as the first content (or tool-call) chunk: sets time to first chunk, once."""
        if self.first_chunk_ns is None:
            self.first_chunk_ns = self.placement.tel.clock.now_ns()
            self.span.set_attribute(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, (self.first_chunk_ns - self.start_ns) / 1e9)

    def usage(self, input_tokens: int | None = None, output_tokens: int | None = None, *, cached_input_tokens: int | None = None) -> None:
        attrs: dict[str, AttributeValue] = {}
        for key, value in (
            (sc.GEN_AI_USAGE_INPUT_TOKENS, input_tokens),
            (sc.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens),
            (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cached_input_tokens),
        ):
            if value is not None:
                attrs[key] = int(value)
        self.span.set_attributes(attrs)
        self.placement.usage(input_tokens, output_tokens)

    def finish_reasons(self, *reasons: str) -> None:
        self.span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, tuple(str(r) for r in reasons))

    def response(self, *, model: str | None = None, response_id: str | None = None, provider: str | None = None) -> None:
        """What the response said: `gen_ai.response.model` / `.id`, and the provider when the
        request could not know it. A span opened without a model is named after this one
        (`chat {model}`), so a model known only from the response still names the span."""
        if model:
            self.span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, model)
            if self.model is None:
                self.model = model
                self.placement.named_by_response(self.span, model, self.operation)
        if response_id:
            self.span.set_attribute(sc.GEN_AI_RESPONSE_ID, response_id)
        if provider:
            self.span.set_attribute(sc.GEN_AI_PROVIDER_NAME, provider)

    def record(self, generation: Generation, messages: Sequence[Message] | None = None) -> None:
        """Everything a `Generation` record holds: usage, timings, prefill child, speculation."""
        tel = self.placement.tel
        self._guard("recording a generation", record_generation, tel, self.span, generation, model=self.model)
        self.placement.usage(generation.input_tokens, generation.output_tokens)
        if messages is not None:
            self._guard("recording content", record_chat_content, tel, self.span, messages, generation)

    def messages(self, inputs: Iterable[Any] | None = None, output_text: str | None = None, *, finish_reason: str | None = None, tool_calls: Iterable[Any] = ()) -> None:
        """Opt-in content (recorded only when content capture is on; redacted and capped)."""
        from agenttrace.telemetry.content import chat_input_messages, chat_output_messages

        policy = self.placement.tel.content
        if not policy.enabled:
            return
        ins = chat_input_messages(inputs) if inputs is not None else None
        outs = chat_output_messages(output_text, finish_reason, tool_calls) if output_text is not None or tool_calls else None
        self._guard("recording content", policy.record_messages, self.span, ins, outs)


class generation_span(LeafScope):  # noqa: N801
    """A model call: `{operation} {model}` (segment generation). `remote=True` (a model behind a
    network call) makes it a CLIENT span, as SPANS.md asks; in-process models are INTERNAL.

    `model` and `provider` may be left out where the caller cannot know them before the call:
    the span is then named `{operation}` until `handle.response(model=...)` names it, and
    `gen_ai.provider.name` is set only if `handle.response(provider=...)` says it."""

    handle_type = GenerationHandle

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: str | None = None,
        operation: str = sc.OP_CHAT,
        remote: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        super().__init__(
            model, provider=provider, operation=operation, remote=remote, max_tokens=max_tokens,
            temperature=temperature, attributes=attributes, telemetry=telemetry,
        )

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        model, kw = self._args[0], self._kwargs
        attrs: dict[str, AttributeValue] = {sc.GEN_AI_OPERATION_NAME: kw["operation"]}
        if kw["provider"]:
            attrs[sc.GEN_AI_PROVIDER_NAME] = kw["provider"]
        if model:
            attrs[sc.GEN_AI_REQUEST_MODEL] = model
        if kw["max_tokens"] is not None:
            attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = int(kw["max_tokens"])
        if kw["temperature"] is not None:
            attrs[sc.GEN_AI_REQUEST_TEMPERATURE] = float(kw["temperature"])
        attrs.update(kw["attributes"] or {})
        kind = SpanKind.CLIENT if kw["remote"] else SpanKind.INTERNAL
        return sc.Segment.GENERATION, sc.generation_span_name(model, kw["operation"]), attrs, kind

    def _handle(self, placement: Placement, span: Span) -> GenerationHandle:
        if placement.run is not None:
            placement.run.saw_model(self._args[0], self._kwargs["provider"])
        return GenerationHandle(placement, span, self._kwargs["operation"], self._args[0])


class _TracedChatModel(ChatModelWrapper):
    """A `ChatModel` whose every call is a generation span placed in the current attempt."""

    def __init__(self, inner: ChatModel, telemetry: Telemetry | None) -> None:
        super().__init__(inner)
        self.telemetry = telemetry

    def chat(self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None) -> Generation:
        attrs = request_attributes(self.inner, params)
        scope = generation_span(
            self.inner.model_name, provider=self.inner.provider_name, remote=self.remote, attributes=attrs,
            telemetry=self.telemetry,
        )
        with scope as g:
            gen = self.inner.chat(messages, params, cancel=cancel)
            if g is not None:
                g.record(gen, messages)
            return gen


def traced_model(model: ChatModel, *, telemetry: Telemetry | None = None) -> ChatModel:
    """Wrap any `ChatModel` (e.g. `LocalChatModel`) so each `chat` call is a generation span
    with prefill and speculation figures, placed in the current step's attempt."""
    return _TracedChatModel(model, telemetry)
