"""The contract between the agent loop and any model: messages in, a `Generation` record out.

A `Generation` is what one model call measured: the text, token counts, and when each phase
began and ended on the shared clock (prefill, every speculation round). The telemetry layer turns
it into spans after the call, so the decoding loop itself never touches OpenTelemetry. Nothing
here imports torch: the runtime, scripted test doubles and remote clients all speak this.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from agenttrace.core.roofline import Roofline

__all__ = [
    "BatchFigures",
    "CancelToken",
    "ChatModel",
    "ConstrainStats",
    "Constraint",
    "Generation",
    "GenerationParams",
    "Message",
    "SpecRound",
    "SpecSummary",
    "current_cancel",
    "prepare_constraint",
    "summarize_rounds",
    "task_cancel",
]

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class Constraint:
    """A grammar the output must match: a JSON schema (as canonical JSON text, so equal schemas
    are one cache key), a regular expression or a Lark grammar. `name` is what spans call it
    (`agenttrace.constrain.grammar`)."""

    kind: Literal["json_schema", "regex", "lark"]
    source: str
    name: str = "tool_call_json"


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings for one call. temperature 0 means greedy. With a `constraint`, the
    model may only produce text its grammar accepts (models that cannot constrain refuse it)."""

    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    seed: int | None = None
    stop: tuple[str, ...] = ()
    constraint: Constraint | None = None

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
    tree_depth: int = 0  # a tree's depth (then `drafted` counts its nodes); 0 for a chain

    @property
    def draft_s(self) -> float:
        return (self.draft_end_ns - self.draft_start_ns) / 1e9

    @property
    def verify_s(self) -> float:
        return (self.verify_end_ns - self.verify_start_ns) / 1e9


@dataclass(frozen=True)
class ConstrainStats:
    """What constraining one generation cost and did (the `agenttrace.constrain.*` attributes).

    mask_s: computing token masks (and cutting drafts), outside the draft and verify times;
    compile_s: compiling the grammar, 0 when it was cached; drafts_cut: drafted tokens the
    grammar refused before verification; rollbacks: times the matcher went back to the accepted
    prefix after a rejected draft; fallback: why the call decoded unconstrained (the grammar did
    not compile), None when it was constrained; dead_end: set when the grammar allowed no token
    before it was complete (the output stops there)."""

    engine: str
    grammar: str
    mask_s: float = 0.0
    compile_s: float = 0.0
    drafts_cut: int = 0
    rollbacks: int = 0
    fallback: str | None = None
    dead_end: str | None = None


@dataclass(frozen=True)
class BatchFigures:
    """What continuous batching did for one generation (`agenttrace.batch.*`, the policy's
    `agenttrace.spec.policy*`): policy "" when the request did not speculate."""

    mean_batch_size: float
    max_batch_size: int
    passes: int
    policy: str = ""
    reason: str = ""
    mean_k: float = 0.0
    k0_share: float = 0.0


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
    constrain: ConstrainStats | None = None  # None: the call had no constraint
    batch: BatchFigures | None = None  # None: generated alone, not in a batching engine
    roofline: Roofline | None = None  # None: not measured (remote models, scripted doubles)

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
    # a tree round's positions are its depths (its `drafted` counts nodes)
    positions = [0] * max(max_k, max((r.tree_depth or r.drafted for r in rounds), default=0))
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


# The running task's cancel token, where the agent loop set it: tools run in a copy of the
# caller's context, so a delegating tool sees it and cancels its sub-agents with the task.
_CANCEL: ContextVar[CancelToken | None] = ContextVar("agenttrace_task_cancel", default=None)


def current_cancel() -> CancelToken | None:
    """The cancel token of the task running in this context, if any (set by `Agent.run`)."""
    return _CANCEL.get()


@contextmanager
def task_cancel(token: CancelToken | None) -> Iterator[None]:
    """Inside the block, `current_cancel()` is `token`."""
    reset = _CANCEL.set(token)
    try:
        yield
    finally:
        _CANCEL.reset(reset)


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


def prepare_constraint(model: object, constraint: Constraint) -> str | None:
    """Ask `model` to get `constraint` ready (a model that constrains decoding has a
    `prepare_constraint` method). Returns why calls under it would decode unconstrained, or None;
    ConstraintUnavailable when the model cannot constrain at all."""
    prepare = getattr(model, "prepare_constraint", None)
    if not callable(prepare):
        from agenttrace.errors import ConstraintUnavailable

        raise ConstraintUnavailable(
            f"{type(model).__name__} cannot constrain decoding to a grammar; use a local model "
            "(LocalChatModel) or run the agent without constrained=True"
        )
    return prepare(constraint)


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

    def prepare_constraint(self, constraint: Constraint) -> str | None:
        return prepare_constraint(self.inner, constraint)

    def chat(
        self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> Generation:
        return self.inner.chat(messages, params, cancel=cancel)
