"""Test doubles shipped with the library, for our tests and for users testing their own agents:
a scripted model whose replies and timings are given, and in-memory telemetry on a fake clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenttrace.clock import FakeClock
from agenttrace.core.chat import CancelToken, Generation, GenerationParams, Message, SpecRound
from agenttrace.errors import GenerationCancelled
from agenttrace.telemetry import Detail, Telemetry

__all__ = ["FakeClock", "ScriptedModel", "ScriptedReply", "capture_telemetry", "spans_by_name"]


@dataclass(frozen=True)
class ScriptedReply:
    """One reply and how long each phase of producing it takes on the fake clock.

    rounds: (drafted, accepted, draft_s, verify_s) per speculation round, after prefill.
    decode_s: time after prefill and the rounds (plain decode steps, sampling).
    """

    text: str
    prefill_s: float = 0.1
    decode_s: float = 0.2
    rounds: tuple[tuple[int, int, float, float], ...] = ()
    output_tokens: int | None = None
    input_tokens: int = 100
    cached_input_tokens: int = 0


class ScriptedModel:
    """A `ChatModel` that returns the given replies in order, advancing a `FakeClock`.

    When the script runs out it raises AssertionError: a test that needs more replies than it
    scripted is wrong. `calls` records the messages of every call.
    """

    provider_name = "scripted"

    def __init__(
        self, replies: Iterable[str | ScriptedReply], clock: FakeClock, *, model_name: str = "scripted-model",
        method: str = "none", num_speculative_tokens: int = 0,
    ) -> None:
        self._replies = [r if isinstance(r, ScriptedReply) else ScriptedReply(r) for r in replies]
        self.clock = clock
        self._name = model_name
        self.method = method
        self.num_speculative_tokens = num_speculative_tokens
        self.calls: list[list[Message]] = []

    @property
    def model_name(self) -> str:
        return self._name

    def chat(
        self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> Generation:
        if not self._replies:
            raise AssertionError(f"ScriptedModel ran out of replies after {len(self.calls)} calls")
        self.calls.append(list(messages))
        if cancel is not None and cancel.cancelled:
            raise GenerationCancelled("cancelled before generation")
        r = self._replies.pop(0)
        c = self.clock
        start = c.now_ns()
        prefill_start = start
        prefill_end = c.advance_s(r.prefill_s)
        rounds = []
        for drafted, accepted, draft_s, verify_s in r.rounds:
            d0 = c.now_ns()
            d1 = c.advance_s(draft_s)
            v1 = c.advance_s(verify_s)
            rounds.append(SpecRound(d0, d1, d1, v1, drafted, accepted))
            if cancel is not None and cancel.cancelled:
                raise GenerationCancelled("cancelled between speculation rounds")
        end = c.advance_s(r.decode_s)
        return Generation(
            text=r.text,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens if r.output_tokens is not None else max(1, len(r.text) // 4),
            finish_reason="stop",
            start_ns=start,
            end_ns=end,
            prefill_start_ns=prefill_start,
            prefill_end_ns=prefill_end,
            first_token_ns=prefill_end,
            cached_input_tokens=r.cached_input_tokens,
            method=self.method,
            num_speculative_tokens=self.num_speculative_tokens,
            rounds=tuple(rounds),
        )


def capture_telemetry(
    clock: FakeClock | None = None, *, detail: Detail = "default", trace_file: str | None = None, **kwargs: object
) -> tuple[Telemetry, InMemorySpanExporter]:
    """Telemetry that exports each span synchronously to memory (and to `trace_file` if given)."""
    memory = InMemorySpanExporter()
    tel = Telemetry(
        clock=clock or FakeClock(), detail=detail, trace_file=trace_file, exporters=[memory], synchronous=True,
        **kwargs,  # type: ignore[arg-type]
    )
    return tel, memory


def spans_by_name(spans: Iterable[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out
