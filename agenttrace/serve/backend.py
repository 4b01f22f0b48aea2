"""Serving requests with our generator: one model, each request traced.

With a batching engine on the model (`LocalChatModel(engine=...)`, the server's default) the
requests in flight generate together in continuous batches, each with its own KV cache; without
one, generation is serialised by a lock (one request at a time). Either way the wait before a
request's prefill starts is recorded as `agenttrace.serve.queue_s`. Each request is a `chat {model}` SERVER
span that continues the caller's trace when the request carries a W3C `traceparent`, with our
generator's prefill child and speculation rounds, and a `parse_tool_call` child when the request
had tools.

Streaming: the generator calls back after prefill and after every round with the tokens so far,
so text streams as it is produced (a speculation round may deliver several tokens at once). The
model keeps its prefix cache across requests: a client agent re-sending its system prompt and
history at every step prefills only what is new.

Stopping: every running request's cancel token is known to the engine, so `shutdown()` stops
them all within a round (and refuses new ones) when the server is told to stop.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import propagate as otel_propagate
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from agenttrace import semconv as sc
from agenttrace.core.chat import CancelToken, Constraint, Generation, GenerationParams, Message, prepare_constraint
from agenttrace.core.tools import Tool
from agenttrace.errors import GenerationCancelled, ParseError
from agenttrace.instrument.operations import parse_span
from agenttrace.runtime.parse import FinalAnswer, parse_decision
from agenttrace.serve.protocol import ServedReply
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.generation_attributes import record_chat_content, record_generation, request_attributes

if TYPE_CHECKING:
    from agenttrace.generation.local import LocalChatModel

__all__ = ["Engine", "EngineResult"]

TokenSink = Callable[[list[int]], None]


@dataclass(frozen=True)
class EngineResult:
    reply: ServedReply
    generation: Generation
    text: str  # the model's raw output


class Engine:
    """Our generator behind the server: `model` (with its drafter, prefix cache and batching
    engine, as configured) serves the requests. `model_name` is the name clients must ask for."""

    def __init__(self, model: LocalChatModel, telemetry: Telemetry, *, constrained: bool = False,
                 constraint_error: str | None = None) -> None:
        self.model = model
        self.telemetry = telemetry
        # constrain "auto" tool requests to the decision grammar too (tool_choice "required", a
        # named tool and response_format json_schema are constrained always)
        self.constrained = constrained
        self.constraint_error = constraint_error  # why requests asking for a grammar are refused
        self._lock = threading.Lock()  # without batching: the model and its KV cache, one generation at a time
        self.batched = getattr(model, "engine", None) is not None
        self._encode_lock = threading.Lock()  # the tokenizer, kept out of the model's queue
        self._running: set[CancelToken] = set()
        self.closing = False

    @property
    def model_name(self) -> str:
        return self.model.model_name

    @property
    def context_length(self) -> int | None:
        """The model's positions (`max_position_embeddings`), or None when its config has none."""
        value = getattr(self.model.model.config, "max_position_embeddings", None)
        return value if isinstance(value, int) and value > 0 else None

    def encode(self, messages: Sequence[Message]) -> list[int]:
        """The prompt's token ids. Runs on a worker thread, without waiting for the model, so an
        over-long prompt is refused while another request generates."""
        with self._encode_lock:
            return self.model.encode_chat(messages)

    def grammar_error(self, constraint: Constraint) -> str | None:
        """Why `constraint` does not compile into a grammar (what is wrong with its schema), or
        None; compiled now, so the generation finds it in the model's cache. Runs on a worker
        thread: a large schema takes milliseconds to compile."""
        return prepare_constraint(self.model, constraint)

    def shutdown(self) -> None:
        """Cancel every request in flight (each stops at its next round) and refuse new ones.
        For a server that is stopping; safe to call from any thread, more than once."""
        self.closing = True
        for token in list(self._running):
            token.cancel()
        batch = getattr(self.model, "engine", None)
        if batch is not None:
            batch.close()  # what is queued there is cancelled too; its thread ends

    def begin(self, headers: Mapping[str, str], params: GenerationParams, stream: bool) -> Span:
        """The request's span, started now (so queueing counts), continuing the caller's trace."""
        parent = otel_propagate.extract(dict(headers))
        attrs = dict(request_attributes(self.model, params))
        attrs[sc.GEN_AI_REQUEST_STREAM] = stream
        name = sc.generation_span_name(self.model_name)
        return self.telemetry.start_span(sc.Segment.GENERATION, name, attrs, kind=SpanKind.SERVER, parent=parent)

    def end(self, span: Span, exc: BaseException | None) -> None:
        self.telemetry.guard("ending a served request's span", self.telemetry.end_span, span, exc)

    def run(
        self,
        span: Span,
        messages: Sequence[Message],
        prompt: list[int],
        params: GenerationParams,
        tools: Sequence[Tool],
        call_id: str,
        *,
        on_tokens: TokenSink | None = None,
        cancel: CancelToken | None = None,
    ) -> EngineResult:
        """Generate after `prompt` (the ids `encode(messages)` gave), waiting for the model
        first, and read a tool call when there are tools.

        Runs on a worker thread. Raises GenerationCancelled when `cancel` is set (or the engine
        shuts down) before or during generation."""
        tel = self.telemetry
        cancel = cancel or CancelToken()
        self._running.add(cancel)
        try:
            queued = tel.clock.now_ns()
            with self._lock if not self.batched else contextlib.nullcontext():
                if not self.batched:
                    span.set_attribute(sc.SERVE_QUEUE_S, (tel.clock.now_ns() - queued) / 1e9)
                if self.closing:
                    raise GenerationCancelled("the server is shutting down")
                if cancel.cancelled:
                    raise GenerationCancelled("the client went away before generation started")
                gen = self.model.complete_ids(prompt, params, cancel=cancel, on_tokens=on_tokens)[0]
            if self.batched:  # the wait for a place in the batch
                span.set_attribute(sc.SERVE_QUEUE_S, max(gen.prefill_start_ns - queued, 0) / 1e9)
        finally:
            self._running.discard(cancel)
        tel.guard("recording a generation", record_generation, tel, span, gen, model=self.model_name)
        tel.guard("recording content", record_chat_content, tel, span, messages, gen)
        reply = self._reply(span, gen, tools, call_id)
        return EngineResult(reply, gen, gen.text)

    def _reply(self, span: Span, gen: Generation, tools: Sequence[Tool], call_id: str) -> ServedReply:
        finish = "length" if gen.finish_reason == "length" else "stop"
        if not tools:
            return ServedReply(gen.text, None, finish, gen.input_tokens, gen.output_tokens)
        # The same parse span (and outcome rules) as any agent's: under this request's span.
        try:
            with trace.use_span(span, end_on_exit=False), parse_span(telemetry=self.telemetry) as parse:
                decision = parse_decision(gen.text, [t.name for t in tools])
                if parse is not None and isinstance(decision, FinalAnswer):
                    parse.final_answer()
                elif parse is not None:
                    parse.tool_call(decision.tool)
        except ParseError:
            # As OpenAI-compatible servers do when their tool parser fails: the text as content.
            return ServedReply(gen.text, None, finish, gen.input_tokens, gen.output_tokens)
        if isinstance(decision, FinalAnswer):
            return ServedReply(decision.text, None, finish, gen.input_tokens, gen.output_tokens)
        span.set_attributes(
            {sc.RESPONSE_TOOL_CALLS: 1, sc.RESPONSE_TOOL_NAMES: (decision.tool,), sc.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",)}
        )
        return ServedReply(None, decision, "tool_calls", gen.input_tokens, gen.output_tokens, call_id)
