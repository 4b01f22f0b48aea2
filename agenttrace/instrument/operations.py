"""What happens inside a wrapped agent's attempt: generation, parse, tool, memory and compaction
spans, each as a context manager (and decorator) with a small handle to record results."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.generation.chat import (
    CancelToken,
    ChatModel,
    ChatModelWrapper,
    Generation,
    GenerationParams,
    Message,
)
from agenttrace.instrument.frames import (
    Frame,
    Placement,
    end_span,
    is_cancellation,
    place_leaf,
    start_span,
)
from agenttrace.instrument.scope import Scope
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.generation import (
    record_chat_content,
    record_generation,
    request_attributes,
)
from agenttrace.telemetry.spans import tool_attributes

__all__ = [
    "CompactionHandle",
    "GenerationHandle",
    "MemoryHandle",
    "ParseHandle",
    "ToolHandle",
    "compaction_span",
    "final_answer",
    "generation_span",
    "memory_span",
    "parse_span",
    "tool_span",
    "traced_model",
]


class _Handle:
    """Base of the handles: the span, its placement, and a guard so recording never raises."""

    def __init__(self, placement: Placement, span: Span) -> None:
        self.placement = placement
        self.span = span

    @property
    def telemetry(self) -> Telemetry:
        return self.placement.tel

    def _guard(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.placement.tel.guard(what, fn, *args, **kwargs)


class _LeafScope(Scope[Any]):
    """A span placed under the current attempt (or the innermost span of ours)."""

    handle_type: type[_Handle] = _Handle

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        raise NotImplementedError

    def _open(self) -> tuple[Any, Telemetry, Span, Frame | None]:
        placement = place_leaf(self._kwargs.get("telemetry"))
        segment, name, attrs, kind = self._describe()
        span = start_span(placement.tel, segment, name, attrs, kind=kind, parent=placement.parent)
        return self._handle(placement, span), placement.tel, span, None

    def _handle(self, placement: Placement, span: Span) -> Any:
        return self.handle_type(placement, span)

    def _close(self, handle: Any, exc: BaseException | None) -> None:
        self._finish(handle, exc)
        end_span(handle.placement.tel, handle.span, exc)

    def _finish(self, handle: Any, exc: BaseException | None) -> None:
        if exc is not None:
            handle.placement.note(error=not is_cancellation(exc))


# -- generation ---------------------------------------------------------------------------------
class GenerationHandle(_Handle):
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
        from agenttrace.telemetry.content import (
            chat_input_messages,
            chat_output_messages,
        )

        policy = self.placement.tel.content
        if not policy.enabled:
            return
        ins = chat_input_messages(inputs) if inputs is not None else None
        outs = chat_output_messages(output_text, finish_reason, tool_calls) if output_text is not None or tool_calls else None
        self._guard("recording content", policy.record_messages, self.span, ins, outs)


class generation_span(_LeafScope):  # noqa: N801
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


# -- parse ----------------------------------------------------------------------------------------
class ParseHandle(_Handle):
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


class parse_span(_LeafScope):  # noqa: N801
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
class ToolHandle(_Handle):
    """`result(value)` records the tool's result when content capture is on."""

    arguments: Any = None

    def result(self, value: Any) -> None:
        self._guard("recording content", self.placement.tel.content.record_tool_call, self.span, None, value)


class tool_span(_LeafScope):  # noqa: N801
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
class MemoryHandle(_Handle):
    def items(self, count: int) -> None:
        """How many memory items were found (search) or written (create)."""
        self.span.set_attribute(sc.MEMORY_ITEMS, int(count))


class memory_span(_LeafScope):  # noqa: N801
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


class CompactionHandle(_Handle):
    def tokens_after(self, count: int) -> None:
        self.span.set_attribute(sc.COMPACTION_TOKENS_AFTER, int(count))


class compaction_span(_LeafScope):  # noqa: N801
    """Shrinking the context: `compact_context` (segment compaction), tokens before and after."""

    handle_type = CompactionHandle

    def __init__(self, *, tokens_before: int, tokens_after: int | None = None, telemetry: Telemetry | None = None) -> None:
        super().__init__(tokens_before=tokens_before, tokens_after=tokens_after, telemetry=telemetry)

    def _describe(self) -> tuple[str, str, dict[str, AttributeValue], SpanKind]:
        attrs: dict[str, AttributeValue] = {sc.COMPACTION_TOKENS_BEFORE: int(self._kwargs["tokens_before"])}
        if self._kwargs["tokens_after"] is not None:
            attrs[sc.COMPACTION_TOKENS_AFTER] = int(self._kwargs["tokens_after"])
        return sc.Segment.COMPACTION, sc.SPAN_COMPACTION, attrs, SpanKind.INTERNAL
