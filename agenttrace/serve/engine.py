"""Serving requests with our generator: one model, one request at a time, each traced.

Generation is serialised by a lock (one model, one KV cache at a time; a request waits its turn,
and the wait is recorded as `agenttrace.serve.queue_s`). Each request is a `chat {model}` SERVER
span that continues the caller's trace when the request carries a W3C `traceparent`, with our
generator's prefill child and speculation rounds, and a `parse_tool_call` child when the request
had tools.

Streaming without changing the generator: `LocalChatModel` has no token callback, but its loop
shows the drafter the whole context at every round. `_ObservingDrafter` delegates to the real
drafter (or proposes nothing, for plain decoding) and reports the tokens generated so far, so
text streams as it is produced, one round behind at most.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate as otel_propagate
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from agenttrace import semconv as sc
from agenttrace.chat import CancelToken, Generation, GenerationParams, Message
from agenttrace.errors import GenerationCancelled, ParseError
from agenttrace.instrument.frames import end_span, start_span
from agenttrace.parse import FinalAnswer, ToolCall, parse_decision
from agenttrace.serve.protocol import ServedReply
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.generation import record_chat_content, record_generation, request_attributes
from agenttrace.tools import Tool

if TYPE_CHECKING:
    from agenttrace.generation.drafters import Drafter
    from agenttrace.generation.local import LocalChatModel

__all__ = ["Engine", "EngineResult"]

TokenSink = Callable[[list[int]], None]


class _ObservingDrafter:
    """Proposes what `inner` proposes (nothing when None) and reports the output so far."""

    def __init__(self, inner: Drafter | None, prompt_len: int, on_tokens: TokenSink | None) -> None:
        from agenttrace.generation.drafters import Draft

        self._draft = Draft
        self.inner = inner
        self.method = inner.method if inner is not None else "none"
        self.prompt_len = prompt_len
        self.on_tokens = on_tokens

    def propose(self, context: Sequence[int], k: int, params: GenerationParams) -> Any:
        if self.on_tokens is not None:
            self.on_tokens(list(context[self.prompt_len :]))  # a copy: the loop keeps appending
        return self.inner.propose(context, k, params) if self.inner is not None else self._draft([])

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.reset()


@dataclass(frozen=True)
class EngineResult:
    reply: ServedReply
    generation: Generation
    text: str  # the model's raw output


class Engine:
    """Our speculative generator behind the server.

    drafter: a factory for the drafter of each request (None: plain decoding); k: draft tokens
    per round. `model_name` is the name clients must ask for.
    """

    def __init__(
        self,
        model: LocalChatModel,
        telemetry: Telemetry,
        *,
        drafter: Callable[[], Drafter] | None = None,
        num_speculative_tokens: int = 3,
    ) -> None:
        self.model = model
        self.telemetry = telemetry
        self.drafter = drafter
        self.k = max(1, num_speculative_tokens)
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self.model.model_name

    def begin(self, headers: Mapping[str, str], params: GenerationParams, stream: bool) -> Span:
        """The request's span, started now (so queueing counts), continuing the caller's trace."""
        parent = otel_propagate.extract(dict(headers))
        attrs = dict(request_attributes(self.model, params))
        attrs[sc.GEN_AI_REQUEST_STREAM] = stream
        name = sc.generation_span_name(self.model_name)
        return start_span(self.telemetry, sc.Segment.GENERATION, name, attrs, kind=SpanKind.SERVER, parent=parent)

    def end(self, span: Span, exc: BaseException | None) -> None:
        self.telemetry.guard("ending a served request's span", end_span, self.telemetry, span, exc)

    def run(
        self,
        span: Span,
        messages: Sequence[Message],
        params: GenerationParams,
        tools: Sequence[Tool],
        call_id: str,
        *,
        on_tokens: TokenSink | None = None,
        cancel: CancelToken | None = None,
    ) -> EngineResult:
        """Generate (waiting for the model first) and read a tool call when there are tools.

        Runs on a worker thread. Raises GenerationCancelled when `cancel` is set."""
        tel = self.telemetry
        queued = tel.clock.now_ns()
        with self._lock:
            span.set_attribute(sc.SERVE_QUEUE_S, (tel.clock.now_ns() - queued) / 1e9)
            if cancel is not None and cancel.cancelled:
                raise GenerationCancelled("the client went away before generation started")
            gen = self._generate(messages, params, on_tokens, cancel)
        tel.guard("recording a generation", record_generation, tel, span, gen)
        tel.guard("recording content", record_chat_content, tel, span, messages, gen)
        reply = self._reply(span, gen, tools, call_id)
        return EngineResult(reply, gen, gen.text)

    def _generate(self, messages: Sequence[Message], params: GenerationParams, on_tokens: TokenSink | None, cancel: CancelToken | None) -> Generation:
        from agenttrace.generation.local import LocalChatModel

        base = self.model
        prompt = base.encode_chat(messages)
        inner = self.drafter() if self.drafter is not None else None
        observer = _ObservingDrafter(inner, len(prompt), on_tokens)
        model = LocalChatModel(
            base.model, base.tokenizer, name=base.model_name, drafter=observer, num_speculative_tokens=self.k,
            clock=base.clock,
        )
        gen, _ = model.complete_ids(prompt, params, cancel=cancel)
        if inner is None:  # plain decoding: the observer's rounds were never speculation
            gen = dataclasses.replace(gen, num_speculative_tokens=0)
        return gen

    def _reply(self, span: Span, gen: Generation, tools: Sequence[Tool], call_id: str) -> ServedReply:
        finish = "length" if gen.finish_reason == "length" else "stop"
        if not tools:
            return ServedReply(gen.text, None, finish, gen.input_tokens, gen.output_tokens)
        decision: ToolCall | FinalAnswer | None = None
        tel = self.telemetry
        parse = start_span(tel, sc.Segment.PARSE, sc.SPAN_PARSE, {}, parent=trace.set_span_in_context(span))
        try:
            decision = parse_decision(gen.text, [t.name for t in tools])
        except ParseError as exc:
            parse.set_attribute(sc.PARSE_OK, False)
            end_span(tel, parse, exc)
            # As OpenAI-compatible servers do when their tool parser fails: the text as content.
            return ServedReply(gen.text, None, finish, gen.input_tokens, gen.output_tokens)
        kind = "tool_call" if isinstance(decision, ToolCall) else "final_answer"
        parse.set_attributes({sc.PARSE_OK: True, sc.PARSE_RESULT: kind})
        end_span(tel, parse, None)
        if isinstance(decision, FinalAnswer):
            return ServedReply(decision.text, None, finish, gen.input_tokens, gen.output_tokens)
        span.set_attributes(
            {sc.RESPONSE_TOOL_CALLS: 1, sc.RESPONSE_TOOL_NAMES: (decision.tool,), sc.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",)}
        )
        return ServedReply(None, decision, "tool_calls", gen.input_tokens, gen.output_tokens, call_id)
