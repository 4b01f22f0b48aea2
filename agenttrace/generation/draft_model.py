"""Drafting with a model: a smaller causal LM sharing the target's tokenizer, or the target's
own first layers (early exit, self-speculation without a second model)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from agenttrace.core.chat import GenerationParams
from agenttrace.generation import kv, sampling
from agenttrace.generation.drafters import Draft

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class DraftModelDrafter:
    """Proposes k tokens by decoding `model` autoregressively over the same context.

    The drafter keeps its own KV cache in step with the target's context: each round it crops its
    cache to the longest prefix it shares with the new context (what the target accepted) and
    feeds only the tokens it has not seen. It keeps the cache between generations too, so an
    agent's next call, which repeats the previous prompt, costs it only the new tokens.
    When sampling, each token is drawn from q (the draft logits transformed exactly like the
    target's: temperature, top-k, top-p) and q is returned for rejection sampling.
    """

    def __init__(self, model: PreTrainedModel, *, method: str = "draft_model", seed_offset: int = 1) -> None:
        self.model = model
        self.method = method
        self._seed_offset = seed_offset
        self._cache = None
        self._seen: list[int] = []  # tokens whose KV entries are in the cache
        self._rng: torch.Generator | None = None

    def reset(self) -> None:
        """Drop the cache (and its memory) and the sampling state."""
        self._cache = None
        self._seen = []
        self._rng = None

    def fork(self) -> DraftModelDrafter:
        """The same draft model with a cache of its own (for a model generating beside this one)."""
        return DraftModelDrafter(self.model, method=self.method, seed_offset=self._seed_offset)

    def _generator(self, params: GenerationParams) -> torch.Generator | None:
        if params.greedy:
            return None
        if self._rng is None:
            seed = None if params.seed is None else params.seed + self._seed_offset
            self._rng = sampling.make_generator(GenerationParams(temperature=1.0, seed=seed), self.model.device)
        return self._rng

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int, params: GenerationParams) -> Draft:
        if self._cache is None:
            self._cache, self._seen = kv.new_cache(self.model), []
        # Keep at least one context token to feed: its logits predict the first draft token.
        keep = min(kv.common_prefix_length(self._seen, context), len(context) - 1)
        kv.crop(self._cache, keep)
        feed = list(context[keep:])
        self._seen = list(context)
        logits = kv.forward(self.model, feed, self._cache, last_only=True)[-1]  # [V]
        rng = self._generator(params)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        for i in range(k):
            if params.greedy:
                token = int(logits.argmax(-1))
            else:
                q = sampling.probabilities(logits, params)
                token = sampling.draw(q, rng)
                probs.append(q)
            tokens.append(token)
            if i + 1 < k:
                logits = kv.forward(self.model, [token], self._cache)[-1]
                self._seen.append(token)
        return Draft(tokens, torch.stack(probs) if probs else None)


def early_exit_view(model: PreTrainedModel, num_layers: int) -> PreTrainedModel:
    """The target's first `num_layers` decoder layers with its final norm and LM head, as a model
    of its own that shares every weight with the target (no copy of the parameters).

    Supports decoder-only models laid out as `model.model.layers` / `model.model.norm` /
    `model.lm_head` (Llama, Mistral, Qwen2, SmolLM, ...).
    """
    inner = getattr(model, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), nn.ModuleList) or not hasattr(model, "lm_head"):
        raise ValueError(f"early exit needs a model.model.layers / model.lm_head layout; {type(model).__name__} has not")
    total = len(inner.layers)
    if not 1 <= num_layers < total:
        raise ValueError(f"num_layers must be between 1 and {total - 1} for a {total}-layer model, got {num_layers}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    # Shallow copies of the two module objects; their submodule dicts are copied too, so giving
    # the view a shorter layer list leaves the target untouched.
    view_inner = copy.copy(inner)
    view_inner._modules = dict(inner._modules)
    view_inner.layers = nn.ModuleList(list(inner.layers)[:num_layers])
    view_inner.config = config
    view = copy.copy(model)
    view._modules = dict(model._modules)
    view.model = view_inner
    view.config = config
    return view


def early_exit_drafter(model: PreTrainedModel, num_layers: int) -> DraftModelDrafter:
    """Self-speculation: draft with the target's first `num_layers` layers."""
    return DraftModelDrafter(early_exit_view(model, num_layers), method="early_exit")
