"""Context compaction: when the next prompt would exceed a token budget, the older turns of the
conversation are replaced by a summary; the system prompt (instructions and tool schemas), the
worked examples, the request and the latest turns stay as they are.

    [system, examples..., request] [turn 1 .. turn n-k] [turn n-k+1 .. turn n]
     kept (the cached prefix)       -> one summary      kept verbatim

A turn is an assistant decision and the observation after it. The summary is written by the
model (`summarizer="model"`: the conversation up to the old turns, then an instruction, so the
summary's prefill reuses the prefix cache of the steps before) or by a deterministic extractive
policy (`"extractive"`: the lines of each old observation that share words or numbers with the
request).

What compaction costs beyond the summary: the next generation's cached prefix now ends where the
summary starts, so everything after it is prefilled again. `reprefill_tokens` on the span counts
those tokens: the prompt tokens the cache would have served without compaction less those it
serves with it (against the prompt of the previous generation, which the cache holds). The
report turns them into seconds with the next generation's measured prefill rate.

A compaction that fails (the summary's generation raised, came back empty or did not shrink the
prompt) leaves the conversation as it was and says why on the span.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from agenttrace import semconv as sc
from agenttrace.core.chat import ChatModel, GenerationParams, Message
from agenttrace.errors import GenerationCancelled
from agenttrace.instrument.operations import compaction_span
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.spans import mark_error

__all__ = ["CompactionConfig", "Compacted", "Compactor", "TokenCounter", "default_budget", "extractive_summary",
           "split_turns"]

SUMMARY_PREFIX = "Summary of the earlier steps: "
SUMMARY_INSTRUCTION = (
    "Before you go on: write the facts from the tool results above that the request still needs, with every "
    "number and name, in at most 60 words. Reply with the facts only, no JSON."
)


@dataclass(frozen=True)
class CompactionConfig:
    """When and how the runtime compacts. budget_tokens: the most prompt tokens a generation is
    given (None: 90% of the model's context, less the reply's max_tokens; no compaction for a
    model whose context is unknown). keep_turns: latest turns kept verbatim (fewer when the
    budget needs it). summarizer: who writes the summary. summary_max_tokens: the summary's
    generation budget. extract_chars: characters the extractive policy keeps per observation."""

    budget_tokens: int | None = None
    keep_turns: int = 1
    summarizer: Literal["model", "extractive"] = "model"
    summary_max_tokens: int = 96
    extract_chars: int = 400


def default_budget(context_length: int | None, max_tokens: int) -> int | None:
    """90% of the context less the reply: room for the reply and a retry's feedback."""
    if not context_length:
        return None
    return max(1, int(0.9 * context_length) - max_tokens)


def _unwrap(model: object, name: str):
    """An attribute of the model or of a wrapped model under it (`traced_model` wraps ours)."""
    seen = 0
    while model is not None and seen < 8:
        value = getattr(type(model), name, None)
        if value is not None:
            return getattr(model, name)
        model = getattr(model, "inner", None)
        seen += 1
    return None


class TokenCounter:
    """Prompt tokens as the model counts them (its chat template and tokenizer, when it has
    `encode_chat`), else an estimate of a token per 4 characters and 4 per message."""

    def __init__(self, model: object) -> None:
        self._encode: Callable[[Sequence[Message]], list[int]] | None = _unwrap(model, "encode_chat")

    def ids(self, messages: Sequence[Message]) -> list[int] | None:
        return self._encode(messages) if self._encode is not None else None

    def count(self, messages: Sequence[Message]) -> int:
        if self._encode is not None:
            return len(self._encode(messages))
        return sum(_estimate(m) for m in messages)

    def reprefill(self, before: Sequence[Message], after: Sequence[Message], cached: Sequence[Message]) -> int:
        """Prompt tokens a prefix cache holding `cached` serves for `before` but not for `after`
        (what replacing one with the other makes the next prefill redo)."""
        if self._encode is not None:
            held = self._encode(cached)  # encoded once: these prompts run to the context's length
            return max(0, _common_prefix(self._encode(before), held) - _common_prefix(self._encode(after), held))
        return max(0, _shared_estimate(before, cached) - _shared_estimate(after, cached))


def context_length(model: object) -> int | None:
    value = _unwrap(model, "context_length")
    return value if isinstance(value, int) and value > 0 else None


def _estimate(m: Message) -> int:
    return 4 + (len(m.content) + 3) // 4


def _shared_estimate(messages: Sequence[Message], cached: Sequence[Message]) -> int:
    """Estimated tokens of the leading messages `messages` and `cached` share."""
    n = 0
    for a, b in zip(messages, cached):
        if a != b:
            break
        n += _estimate(a)
    return n


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    # kv.common_prefix_length's twin: generation/kv.py imports torch, the runtime's loop need not
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def split_turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages after the protected head, as turns: each assistant message with what follows it
    up to the next one (a summary or note before the first assistant message is a turn alone)."""
    turns: list[list[Message]] = []
    for m in messages:
        if m.role == "assistant" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


_WORD = re.compile(r"[\w.%-]+")


def extractive_summary(turns: Sequence[Sequence[Message]], request: str, chars: int) -> str:
    """Deterministic: per old turn, the call it made and the lines of its observation that share
    a word (4+ letters) or a number with the request, else its first lines, up to `chars`."""
    wanted = {w for w in _WORD.findall(request.casefold()) if len(w) >= 4 or any(c.isdigit() for c in w)}
    parts = []
    for turn in turns:
        call = next((m.content for m in turn if m.role == "assistant"), "")
        text = "\n".join(m.content for m in turn if m.role != "assistant")
        text = text.removeprefix(SUMMARY_PREFIX)
        lines = [ln.strip() for ln in re.split(r"\n|(?<=[.;])\s+", text) if ln.strip()]
        hits = [ln for ln in lines if wanted & set(_WORD.findall(ln.casefold()))] or lines
        kept, size = [], 0
        for ln in hits:
            if size + len(ln) > chars and kept:
                break
            kept.append(ln[:chars])
            size += len(ln) + 1
        head = f"{_short_call(call)}: " if call else ""
        parts.append(head + " ".join(kept))
    return " | ".join(p for p in parts if p)


def _short_call(decision: str) -> str:
    try:
        obj = json.loads(decision)
    except (json.JSONDecodeError, TypeError):
        return decision[:80]
    if isinstance(obj, dict) and "tool" in obj:
        return f"{obj['tool']}({json.dumps(obj.get('arguments', {}), ensure_ascii=False)[:80]})"
    return decision[:80]


def _clean_summary(text: str) -> str:
    text = text.strip()
    try:  # a model taught to answer in JSON may wrap the summary: take the text inside
        obj = json.loads(text)
        if isinstance(obj, dict) and len(obj) == 1 and isinstance(next(iter(obj.values())), str):
            text = next(iter(obj.values())).strip()
    except json.JSONDecodeError:
        pass
    return text


@dataclass(frozen=True)
class Compacted:
    """What one compaction did (also on its span)."""

    messages: list[Message] | None  # the compacted conversation; None when it failed
    tokens_before: int
    tokens_after: int
    turns: int  # turns replaced by the summary
    reprefill_tokens: int
    error: str | None = None


class _Failed(Exception):
    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


class Compactor:
    """Keeps one agent's prompts under its budget (see the module docstring).

    `model` is the agent's traced model (the summary's generation is a span under the
    compaction's); `raw` the model underneath, whose tokenizer and context length count."""

    def __init__(self, config: CompactionConfig, model: ChatModel, raw: object, max_tokens: int) -> None:
        self.config = config
        self.model = model
        self.counter = TokenCounter(raw)
        self.budget = config.budget_tokens or default_budget(context_length(raw), max_tokens)

    @property
    def enabled(self) -> bool:
        return self.budget is not None

    def over_budget(self, messages: Sequence[Message]) -> int | None:
        """The prompt's tokens when they exceed the budget, else None."""
        if self.budget is None:
            return None
        n = self.counter.count(messages)
        return n if n > self.budget else None

    def compact(self, history: list[Message], protected: int, request: str, tokens_before: int,
                previous_prompt: Sequence[Message] | None, telemetry: Telemetry | None = None) -> Compacted:
        """Compact `history` (its first `protected` messages stay) under a `compact_context`
        span. Never raises for a failed summary: the result says why and keeps no messages.
        Cancellation passes through."""
        cfg = self.config
        with compaction_span(tokens_before=tokens_before, telemetry=telemetry) as h:
            if h is not None:
                h.span.set_attributes({sc.COMPACTION_BUDGET: int(self.budget or 0), sc.COMPACTION_POLICY: cfg.summarizer})
            try:
                messages, turns = self._summarise(history, protected, request)
                after = self.counter.count(messages)
                if after >= tokens_before:
                    raise _Failed("compaction_not_smaller", f"the summary left {after} tokens of {tokens_before}")
            except GenerationCancelled:
                raise
            except _Failed as exc:
                return self._failed(h, tokens_before, exc.kind, str(exc))
            except Exception as exc:  # the summary's generation failed (ContextTooLong, a server down, a bug)
                # compaction only saves tokens: whatever broke it, the agent goes on uncompacted
                return self._failed(h, tokens_before, "summary_failed", f"{type(exc).__name__}: {exc}")
            reprefill = self.counter.reprefill(history, messages, previous_prompt) if previous_prompt else 0
            if h is not None:
                h.tokens_after(after)
                h.span.set_attributes({sc.COMPACTION_TURNS: turns, sc.COMPACTION_REPREFILL_TOKENS: reprefill})
            return Compacted(messages, tokens_before, after, turns, reprefill)

    def _failed(self, h, tokens: int, kind: str, why: str) -> Compacted:
        if h is not None:
            h.tokens_after(tokens)
            mark_error(h.span, kind, f"compaction failed, the context is left as it was: {why}")
        return Compacted(None, tokens, tokens, 0, 0, error=f"{kind}: {why}")

    def _summarise(self, history: list[Message], protected: int, request: str) -> tuple[list[Message], int]:
        head, tail = history[:protected], history[protected:]
        turns = split_turns(tail)
        if not turns:
            raise _Failed("nothing_to_compact", "no turn after the request: the protected prompt alone is over budget")
        # Keep as many of the latest turns as configured, fewer while the result is over budget
        # (down to none: a single huge observation is summarised too).
        best: list[Message] = []
        replaced = 0
        for keep in range(min(self.config.keep_turns, len(turns) - 1), -1, -1):
            old, kept = turns[: len(turns) - keep], turns[len(turns) - keep:]
            summary = self._summary(head, old, request)
            best = [*head, Message("user", SUMMARY_PREFIX + summary), *(m for t in kept for m in t)]
            replaced = len(old)
            if self.budget is None or self.counter.count(best) <= self.budget:
                break
        return best, replaced

    def _summary(self, head: list[Message], old: list[list[Message]], request: str) -> str:
        if self.config.summarizer == "extractive":
            text = extractive_summary(old, request, self.config.extract_chars)
        else:
            prompt = [*head, *(m for t in old for m in t), Message("user", SUMMARY_INSTRUCTION)]
            gen = self.model.chat(prompt, GenerationParams(max_tokens=self.config.summary_max_tokens))
            text = _clean_summary(gen.text)
        if not text:
            raise _Failed("summary_empty", "the summary came back empty")
        return text
