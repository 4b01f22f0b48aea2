"""Reusing the KV cache of earlier calls: an agent re-sends the same system prompt, tool schemas,
examples and history at every step and every retry, and prefilling them again is most of a short
tool call's latency. Like vLLM's automatic prefix caching or SGLang's radix cache, but for one
process: keep the caches of recent calls and start each call from the longest common prefix.

Entries hold the per-layer key/value tensors of a finished call. A new call gets a fresh cache
built from slices of the best entry, so the stored tensors are never modified (transformers'
dynamic cache grows by concatenation, which allocates): two calls may share one prefix safely.
Memory is bounded in bytes; the least recently used entries go first.

A model that keeps its KV cache in its own library (llama_backend's) gives caches that `share` a
prefix themselves: an entry then keeps the finished call's cache object, and a hit is that
cache's `share(length)`, bounded also by what the cache says one prefix cache may keep of its
context (`max_kept_bytes`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from agenttrace.generation import kv
from agenttrace.generation.prompt_store import MIN_TOKENS

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

    from agenttrace.generation.prompt_store import PromptStore

_log = logging.getLogger(__name__)


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values): [1, heads, len, dim]
    nbytes: int
    features: torch.Tensor | None = None  # [len, d]: the target's features there, for feature drafters
    native: object | None = None  # a library-kept cache (llama_backend.LlamaCache) instead of `layers`


class Hit(NamedTuple):
    """What `take` found: a cache holding the first `length` prompt tokens, and the target's
    features of those positions [length, d] when they were asked for."""

    cache: Cache
    length: int
    features: torch.Tensor | None = None


class PrefixCache:
    """Longest-common-prefix reuse of earlier calls' KV caches, within `max_bytes`."""

    def __init__(self, max_bytes: int = 512 * 2**20, store: PromptStore | None = None) -> None:
        self.max_bytes = max_bytes
        # prefixes on disk for later processes (prompt_store.py): for models whose caches save
        self.store = store
        self._entries: list[_Entry] = []  # most recently used last
        self._openings: list[tuple[int, ...]] = []  # open_with's, until a call starts with one
        self.hits = 0
        self.reused_tokens = 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._live())

    def __len__(self) -> int:
        return len(self._live())

    def _live(self) -> list[_Entry]:
        """The entries, less those whose library-kept cells the model took back for a call that
        needed them (LlamaCache.keep): they leave the cache here."""
        self._entries = [e for e in self._entries if e.native is None or e.native.length]
        return self._entries

    def clear(self) -> None:
        self._entries.clear()

    def tensors(self) -> list[torch.Tensor]:
        """The key/value (and feature) tensors the entries hold now, as stored (not copies): for
        memory accounting, which must tell what the cache keeps on purpose from what leaked."""
        kept = [t for entry in self._entries for layer in entry.layers for t in layer]
        return kept + [e.features for e in self._entries if e.features is not None]

    def take(self, model: PreTrainedModel, prompt: Sequence[int], tokens: int = 0, *, features: bool = False) -> Hit:
        """A cache holding the longest cached prefix of `prompt` (never all of it: the last prompt
        token must be run to get the next token's logits), and that prefix's length. `tokens`:
        what the call may hold in all (the size of a compiled model's static cache). With
        `features`, only entries that kept the target's features count, and the hit has them."""
        best, length = None, 0
        for entry in self._live():
            if features and entry.features is None:
                continue
            n = kv.common_prefix_length(entry.tokens, prompt)
            if n > length:
                best, length = entry, n
        shared, length = length, min(length, len(prompt) - 1)
        opening = None
        if self.store is not None and not features:
            opening = self._opening_of(prompt)
            loaded = self.store.load(model, prompt, tokens, longer_than=length)
            if loaded is not None:  # a prefix an earlier process kept on disk
                self.hits += 1
                self.reused_tokens += loaded[1]
                return Hit(*loaded, None)
        if opening is not None and length < len(opening):  # open_with: its own pass, kept, then shared
            cache = kv.new_cache(model, tokens)
            kv.prefill(model, list(opening), cache)
            self.store.save(cache, opening)
            self.put(opening, cache)
            return Hit(cache.share(len(opening), tokens), len(opening), None)
        if best is None or length <= 0:
            return Hit(kv.new_cache(model, tokens), 0, None)
        self._entries.remove(best)
        self._entries.append(best)  # most recently used
        self.hits += 1
        self.reused_tokens += length
        if best.native is not None:
            if self.store is not None and shared < min(len(best.tokens), len(prompt) - 1):
                # two conversations part here: what they share (the system prompt, the tools) is
                # what the next process sends again, so it goes to disk (once)
                self.store.save(best.native, prompt[:shared])
            feats = best.features[:length] if features and best.features is not None else None
            return Hit(best.native.share(length, tokens), length, feats)
        data = [(k[:, :, :length], v[:, :, :length]) for k, v in best.layers]
        feats = best.features[:length] if features and best.features is not None else None
        if isinstance(model, kv.Stepper):  # a compiled model: its own static cache, filled
            cache = model.new_cache(tokens)
            for layer, (k, v) in zip(cache.layers, data, strict=True):
                layer.update(k, v)  # copies into the static tensors: the entry stays as stored
            return Hit(cache, length, feats)
        from transformers import DynamicCache

        return Hit(DynamicCache(ddp_cache_data=data, config=model.config), length, feats)

    def open_with(self, opening: Sequence[int]) -> None:
        """Have the next call whose prompt starts with `opening` (what later processes send first
        again: an agent's system prompt, tools and examples) prefill it in a pass of its own, kept
        here and on disk, unless memory or the store has it already. The call then prefills only
        what follows, in the same passes as a later process that loads the opening from disk, so
        both compute the same bits (a pass's bits depend on its length on llama.cpp's kernels)."""
        if self.store is not None and len(opening) >= MIN_TOKENS:
            self._openings.append(tuple(opening))

    def _opening_of(self, prompt: Sequence[int]) -> tuple[int, ...] | None:
        """The pending opening `prompt` starts with (taken out), or None."""
        for opening in self._openings:
            if len(opening) < len(prompt) and kv.common_prefix_length(opening, prompt) == len(opening):
                self._openings.remove(opening)
                return opening
        return None

    def put(self, tokens: Sequence[int], cache: Cache, features: torch.Tensor | None = None) -> None:
        """Keep `cache`, which holds the KV entries of `tokens` (prompt and generated text), and
        the target's features of those positions when given (at least the cache's length)."""
        if callable(getattr(cache, "share", None)):
            length = kv.cached_length(cache)
            if features is not None:
                features = features[:length] if features.shape[0] >= length else None
            cache.keep()
            self._keep(_Entry(tuple(tokens[:length]), [], cache.nbytes + (features.nbytes if features is not None else 0),
                              features, native=cache), min(self.max_bytes, cache.max_kept_bytes))
            return
        from transformers import StaticCache
        from transformers.cache_utils import DynamicLayer, StaticLayer

        if not all(type(layer) in (DynamicLayer, StaticLayer) and layer.is_initialized for layer in cache.layers):
            # Sliding-window or hybrid layers keep only part of the sequence: a prefix cut from
            # them would be wrong, so such models run without prefix reuse.
            _log.debug("prefix cache skipped: the cache has non-dynamic layers")
            return
        length = kv.cached_length(cache)
        tokens = tuple(tokens[:length])
        if isinstance(cache, StaticCache):
            # a static cache is the call's own buffer at full capacity: keep just the used part
            layers = [(layer.keys[:, :, :length].clone(), layer.values[:, :, :length].clone()) for layer in cache.layers]
        else:
            layers = [(layer.keys, layer.values) for layer in cache.layers]
        if features is not None:
            features = features[:length] if features.shape[0] >= length else None
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers) + (features.nbytes if features is not None else 0)
        self._keep(_Entry(tokens, layers, nbytes, features), self.max_bytes)

    def _keep(self, entry: _Entry, max_bytes: int) -> None:
        if entry.nbytes > max_bytes:
            return
        # An entry that is a prefix of the new one is covered by it (unless only it has features).
        self._entries = [e for e in self._live() if kv.common_prefix_length(e.tokens, entry.tokens) < len(e.tokens)
                         or (e.features is not None and entry.features is None)]
        self._entries.append(entry)
        while self.nbytes > max_bytes:
            self._entries.pop(0)
