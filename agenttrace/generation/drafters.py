"""Drafters propose the next few tokens cheaply; the target model then verifies them.

A drafter sees the whole token context (prompt and everything generated so far) each round, so a
stateful drafter (one with its own KV cache) keeps itself in step by comparing with what it saw
last time; the loop never has to tell it what was accepted.

    PromptLookupDrafter   copies what followed an earlier occurrence of the last n-gram (here)
    DraftModelDrafter     a smaller causal LM with the target's tokenizer (draft_model.py)
    early_exit_drafter    the target's own first N layers, norm and head (draft_model.py)

A learned feature head (EAGLE-style) drafts from the target's hidden states instead of tokens.
It fits this interface as a drafter whose `propose` reads state it was given by the loop: the
place to add it is a `method = "eagle"` drafter plus a loop option to request
`output_hidden_states` on verify passes and hand the last accepted position's hidden state over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from agenttrace.core.chat import GenerationParams


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

    # Optional: `fork() -> Drafter`, a drafter sharing this one's weights with state of its own,
    # for a model that generates beside this one (LocalChatModel.sibling); see `fork_drafter`.


def fork_drafter(drafter: Drafter) -> Drafter:
    """The drafter's `fork()` (shared weights, state of its own); the drafter itself when it has
    none, which only a stateless drafter allows."""
    fork = getattr(drafter, "fork", None)
    return fork() if callable(fork) else drafter


def longest_suffix_match(context: Sequence[int], max_ngram: int) -> tuple[int, int]:
    """(n, end): the longest n <= max_ngram such that the context's last n tokens also occur
    earlier, ending at index `end` (exclusive) with at least one token after them. The most recent
    occurrence wins a tie: recent turns (the last observation, the retry message) are the likeliest
    to be copied. (0, 0) when even the last token never occurred before."""
    last = context[-1]
    best_n, best_end = 0, 0
    for j in range(len(context) - 2, -1, -1):  # j: candidate position of the last token
        if context[j] != last:
            continue
        n = 1
        while n < max_ngram and j - n >= 0 and context[j - n] == context[-1 - n]:
            n += 1
        if n > best_n:
            best_n, best_end = n, j + 1
            if n == max_ngram:
                break
    return best_n, best_end


def prompt_lookup(
    context: Sequence[int], k: int, max_ngram: int = 8, min_ngram: int = 2, tokens_per_match: int = 2
) -> list[int]:
    """Up to `k` tokens that followed the latest earlier occurrence of the longest suffix of the
    context (prompt lookup decoding, Saxena 2023), drafting more the longer the match.

    Why scale by the match: measured on the bundled model's tool calls, a 1-token match was
    followed by the right next token 19-53% of the time, an 8-token match 87-89% of the time with
    copied runs of 5-7 tokens. Verifying even one draft token costs a ~1.6x wider forward pass on
    a CPU, so weak matches are not drafted at all (`min_ngram`) and a match of n tokens drafts at
    most `tokens_per_match * n`.
    """
    if len(context) < 2 or k <= 0:
        return []
    n, end = longest_suffix_match(context, max_ngram)
    if n < min_ngram:
        return []
    return list(context[end : end + min(k, tokens_per_match * n)])


class PromptLookupDrafter:
    """Drafts by copying from the context (no model, no state): `prompt_lookup` each round.

    min_ngram / max_ngram: the shortest suffix match worth drafting from, and the longest looked
    for; tokens_per_match: draft at most this many tokens per matched token."""

    method = "prompt_lookup"

    def __init__(self, max_ngram: int = 8, min_ngram: int = 2, tokens_per_match: int = 2) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if tokens_per_match < 1:
            raise ValueError(f"tokens_per_match must be at least 1, got {tokens_per_match}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.tokens_per_match = tokens_per_match

    def propose(self, context: Sequence[int], k: int, params: GenerationParams) -> Draft:
        return Draft(prompt_lookup(context, k, self.max_ngram, self.min_ngram, self.tokens_per_match))

    def reset(self) -> None:
        pass

    def fork(self) -> PromptLookupDrafter:
        return self  # no state to keep apart
