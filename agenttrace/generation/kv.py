"""Forward passes over a transformers causal LM with an explicit KV cache.

Invariant kept by every caller: before a forward pass, the cache holds exactly the tokens that
precede the ones passed in. Speculation appends draft tokens and then crops back to what the
target accepted, so after each round the cache again holds the accepted sequence minus the last
(pending) token.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:  # (transformers is imported where a transformers model is used: a model outside
    # torch, llama_backend's, runs without it)
    from transformers import Cache, PreTrainedModel


@runtime_checkable
class Stepper(Protocol):
    """What runs the passes itself, in place of a model (compiled.CompiledDecoder): the loop
    hands it the model's place and these functions hand it the work."""

    def new_cache(self, tokens: int) -> Cache: ...

    def forward(self, ids: list[int], cache: Cache, last_only: bool = False) -> torch.Tensor: ...

    def prefill(self, ids: list[int], cache: Cache) -> torch.Tensor: ...


@lru_cache(maxsize=32)
def forward_kwargs(model_cls: type) -> tuple[str, bool]:
    """The KV-cache keyword (`cache` in transformers 5, `past_key_values` before) and whether
    the model can skip the LM head for positions whose logits are not needed."""
    params = inspect.signature(model_cls.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return cache_kw, "logits_to_keep" in params


def new_cache(model: PreTrainedModel, tokens: int = 0) -> Cache:
    """An empty cache for a call that may hold `tokens` tokens (only a compiled model's static
    cache needs that size; a dynamic cache grows)."""
    if isinstance(model, Stepper):
        return model.new_cache(tokens)
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def forward(model: PreTrainedModel, ids: list[int], cache: Cache, *, last_only: bool = False) -> torch.Tensor:
    """Run `ids` through the model after the cached tokens; returns float logits [n, vocab]
    (or [1, vocab] with `last_only`, which skips the LM head for all but the last position:
    for a 500-token prefill over a 49k vocabulary that head is a large share of the cost)."""
    if isinstance(model, Stepper):
        return model.forward(ids, cache, last_only)
    cache_kw, can_keep = forward_kwargs(type(model))
    input_ids = torch.tensor([ids], dtype=torch.long, device=model.device)  # [1, n]
    kwargs = {cache_kw: cache, "use_cache": True}
    if last_only and can_keep:
        kwargs["logits_to_keep"] = 1
    logits = model(input_ids=input_ids, **kwargs).logits[0]  # [n or 1, vocab]
    if last_only:
        logits = logits[-1:]
    return logits.float()


def forward_features(model: PreTrainedModel, ids: list[int], cache: Cache, *, last_only: bool = False,
                     positions: torch.Tensor | None = None,
                     visible: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`forward`, also returning the target's features: its last hidden state after the final
    norm [n, d], what its LM head multiplies (draft heads read them). Logits are float [n, vocab]
    (or the last row with `last_only`); features stay in the model's dtype.

    positions [n] and visible [n, cached + n] (bool, True where a row may attend) score a draft
    tree in one pass: each node at its depth's position, seeing the context and its ancestors.
    None: the next positions, causally. Needs the `model.model` / `model.lm_head` layout and
    the eager path, or a Stepper with its own `forward_features` (llama.cpp's, chains only);
    ValueError otherwise: the caller drafts without features."""
    if isinstance(model, Stepper) and callable(getattr(model, "forward_features", None)):
        if positions is not None or visible is not None:  # (LocalChatModel refuses tree drafters there)
            raise ValueError(f"{type(model).__name__} scores no draft tree: it takes no positions or attention mask")
        return model.forward_features(ids, cache, last_only)
    inner, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if isinstance(model, Stepper) or inner is None or head is None:
        raise ValueError(f"features need an eager model with model.model and lm_head; {type(model).__name__} has not")
    cache_kw, _ = forward_kwargs(type(inner))
    input_ids = torch.tensor([ids], dtype=torch.long, device=model.device)  # [1, n]
    kwargs = {cache_kw: cache, "use_cache": True}
    if positions is not None:
        kwargs["position_ids"] = positions.to(model.device)[None]
    if visible is not None:
        kwargs["attention_mask"] = visible.to(model.device)[None, None]  # [1, 1, n, cached + n]
    hidden = inner(input_ids=input_ids, **kwargs).last_hidden_state[0]  # [n, d]
    logits = head(hidden[-1:] if last_only else hidden)
    return logits.float(), hidden


def prefill(model: PreTrainedModel, ids: list[int], cache: Cache) -> torch.Tensor:
    """The prompt's pass (or what the prefix cache left of it): float logits of its last
    position, [1, vocab]. A Stepper runs it its own way: a compiled model eagerly, whatever the
    length, since its graphs are for decode and verify widths (a suffix of a few tokens left by
    the prefix cache would otherwise compile a new graph inside the call)."""
    if isinstance(model, Stepper):
        return model.prefill(ids, cache)
    return forward(model, ids, cache, last_only=True)


def cached_length(cache: Cache) -> int:
    return int(cache.get_seq_length())  # a static cache keeps its length in a tensor


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share (what a cache built for one holds for the other)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def crop(cache: Cache, length: int) -> None:
    """Drop cached entries beyond `length` tokens (rejected draft tokens)."""
    extra = cached_length(cache) - length
    if extra > 0:
        # transformers 5: a negative argument is the number of tokens to remove (for a static
        # cache that only moves its length back; the next pass overwrites the stale entries).
        # That length is a tensor made in inference mode, which may change only in it: the loop
        # also crops after its inference block, before handing the cache to the prefix cache.
        with torch.inference_mode():
            cache.crop(-extra)


def keep_path(cache: Cache, base: int, rows: Sequence[int]) -> None:
    """After a tree's verify pass (the pending token at `base`, then one row per node): keep
    the pending token's entry and the entries of `rows` (verify rows >= 1, in path order), moved
    next to it, and drop the rest, so the cache holds the accepted sequence as a chain would."""
    if rows and list(rows) != list(range(1, len(rows) + 1)):
        with torch.inference_mode():
            idx = torch.tensor([base + r for r in rows])
            for layer in cache.layers:
                for t in (layer.keys, layer.values):  # [batch, heads, length, dim]
                    t[:, :, base + 1 : base + 1 + len(rows)] = t[:, :, idx.to(t.device)]
    crop(cache, base + 1 + len(rows))
