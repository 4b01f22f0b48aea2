"""The contract between the agent loop and any model: messages in, a `Generation` record out.

A `Generation` is what one model call measured: the text, token counts, and when each phase
began and ended on the shared clock (prefill, every speculation round). The telemetry layer turns
it into spans after the call, so the decoding loop itself never touches OpenTelemetry. Nothing
here imports torch: the runtime, scripted test doubles and remote clients all speak this.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "CancelToken",
    "ChatModel",
    "Generation",
    "GenerationParams",
    "Message",
    "SpecRound",
    "SpecSummary",
    "summarize_rounds",
]

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings for one call. temperature 0 means greedy."""

    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class SpecRound:
    """One speculation round: the drafter proposed `drafted` tokens, the target kept `accepted`."""

    draft_start_ns: int
    draft_end_ns: int
    verify_start_ns: int
    verify_end_ns: int
    drafted: int
    accepted: int
    k: int = 0  # the most tokens the round asked the drafter for (0: not recorded)

    @property
    def draft_s(self) -> float:
        return (self.draft_end_ns - self.draft_start_ns) / 1e9

    @property
    def verify_s(self) -> float:
        return (self.verify_end_ns - self.verify_start_ns) / 1e9


@dataclass(frozen=True)
class Generation:
    """What one model call produced and measured. Times are clock readings in epoch ns."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    start_ns: int
    end_ns: int
    prefill_start_ns: int
    prefill_end_ns: int
    first_token_ns: int | None = None
    # Prompt tokens whose KV entries came from a cache instead of being computed in prefill.
    cached_input_tokens: int = 0
    method: str = "none"  # agenttrace.spec.method
    num_speculative_tokens: int = 0  # k, or its maximum when adaptive
    rounds: tuple[SpecRound, ...] = ()
    fallback_reason: str | None = None

    @property
    def prefill_tokens(self) -> int:
        return self.input_tokens - self.cached_input_tokens

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the whole call, prefill included."""
        return self.output_tokens / self.duration_s if self.end_ns > self.start_ns else 0.0


@dataclass(frozen=True)
class SpecSummary:
    """The `agenttrace.spec.*` figures of one generation (SPANS.md)."""

    rounds: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_per_position: tuple[int, ...]
    draft_s: float
    verify_s: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        # Counts the target's bonus token, as vLLM does: tokens gained per verify pass.
        return 1.0 + self.accepted_tokens / self.rounds if self.rounds else 0.0


def summarize_rounds(rounds: Sequence[SpecRound], max_k: int) -> SpecSummary:
    """Aggregate rounds; position i counts the rounds whose i-th draft token was accepted."""
    positions = [0] * max(max_k, max((r.drafted for r in rounds), default=0))
    for r in rounds:
        for i in range(r.accepted):
            positions[i] += 1
    return SpecSummary(
        rounds=len(rounds),
        draft_tokens=sum(r.drafted for r in rounds),
        accepted_tokens=sum(r.accepted for r in rounds),
        acceptance_per_position=tuple(positions),
        draft_s=sum(r.draft_s for r in rounds),
        verify_s=sum(r.verify_s for r in rounds),
    )


class CancelToken:
    """Set from any thread to stop a running task; checked between speculation rounds and steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns chat messages into a `Generation`.

    Implementations read time from the clock they were given (the same one as the telemetry),
    and raise `GenerationCancelled` when `cancel` is set mid-call.
    """

    @property
    def model_name(self) -> str: ...

    @property
    def provider_name(self) -> str: ...

    def chat(
        self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> Generation: ...



class ChatModelWrapper:
    """A `ChatModel` around another one: names (and `remote`) pass through, `chat` calls
    `inner`. The one base of the wrappers (tracing, the bench's watchers), so each adds only
    what it does around the call."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def provider_name(self) -> str:
        return self.inner.provider_name

    @property
    def remote(self) -> bool:
        return bool(getattr(self.inner, "remote", False))

    def chat(
        self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> Generation:
        return self.inner.chat(messages, params, cancel=cancel)
