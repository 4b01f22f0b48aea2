"""Drafters propose the next few tokens cheaply; the target model then verifies them.

A drafter sees the whole token context (prompt and everything generated so far) each round, so a
stateful drafter (one with its own KV cache) keeps itself in step by comparing with what it saw
last time; the loop never has to tell it what was accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from agenttrace.chat import GenerationParams


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and, for sampling drafters, the distribution each was drawn from.

    `probs` is None for a deterministic drafter: its q is one-hot on each proposed token.
    """

    tokens: list[int]
    probs: torch.Tensor | None = None  # [len(tokens), vocab]


@runtime_checkable
class Drafter(Protocol):
    """Proposes up to `k` tokens to follow `context`."""

    method: str  # the agenttrace.spec.method value

    def propose(self, context: Sequence[int], k: int, params: GenerationParams) -> Draft: ...

    def reset(self) -> None:
        """Forget any per-generation state (called when a generation starts or ends)."""
        ...


def prompt_lookup(context: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to `k` tokens that followed the most recent earlier occurrence of the context's last
    n-gram, trying the longest n first (Saxena's prompt lookup decoding).

    Tool calls copy names, keys and values from the prompt, so the tokens after an earlier match
    are often exactly what comes next. The most recent match wins because recent turns (the last
    observation, the retry message) are the likeliest to be copied.
    """
    n_ctx = len(context)
    for n in range(min(max_ngram, n_ctx - 1), min_ngram - 1, -1):
        tail = list(context[n_ctx - n :])
        first = tail[0]
        # Scan candidate starts from the right; a match must leave at least one token after it.
        for start in range(n_ctx - n - 1, -1, -1):
            if context[start] == first and list(context[start : start + n]) == tail:
                follow = list(context[start + n : start + n + k])
                if follow:
                    return follow
    return []


class PromptLookupDrafter:
    """Drafts by copying from the context (no model, no state): `prompt_lookup` each round."""

    method = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, context: Sequence[int], k: int, params: GenerationParams) -> Draft:
        return Draft(prompt_lookup(context, k, self.max_ngram, self.min_ngram))

    def reset(self) -> None:
        pass
