"""Drafters that read the target's features: EAGLE (a feature head fed back on itself) and
Medusa (one head per depth). The loop hands each round the features of every confirmed position
(`reads_features`); a drafter keeps what it computed for the context it saw last and only adds
the new positions, like the draft-model drafter's KV cache.

Drafting is greedy (argmax) under greedy decoding and a draw from the head's transformed
distribution q otherwise, with q returned over the target's whole vocabulary (zero outside the
draft vocabulary), so rejection sampling stays exact.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agenttrace.core.chat import GenerationParams
from agenttrace.generation import sampling
from agenttrace.generation.drafters import Draft, fork_drafter
from agenttrace.generation.heads import EagleHead, HeadCache, MedusaHeads, quantize_head
from agenttrace.generation.kv import common_prefix_length
from agenttrace.generation.tree import TreeDraft

__all__ = ["EagleDrafter", "LookupThenHead", "MedusaDrafter", "TreeShape", "bind_to", "head_drafter", "int8_pays"]


@dataclass(frozen=True)
class TreeShape:
    """How an EAGLE draft tree grows (EAGLE-2's dynamic tree): at each depth the `expand` nodes
    with the highest cumulative draft probability get their `branch` likeliest children; of
    every node made, the `size` likeliest are verified (the loop's k caps the depth)."""

    # The default measured best of nine shapes and chains on the bundled model, 2 threads
    # (scripts/tree_probe.py; BENCHMARKS.md, "Trained drafters"): deeper or wider trees raised
    # the acceptance length less than their wider verify passes cost on a CPU.
    depth: int = 4
    branch: int = 2
    expand: int = 2
    size: int = 8


def bind_to(head: EagleHead | MedusaHeads, model) -> None:
    """Give `head` the target's embedding and output tables (the output's float weights: a
    quantized output layer is read through its dequantized copy; tied embeddings are used as
    they are, the table the quantized layer approximates), and put it on the target's device.
    The head stays in fp32 there: it drafts from fp32 activations whatever the target's dtype."""
    embedding = model.get_input_embeddings().weight.detach()
    head.to(embedding.device)
    out = model.get_output_embeddings()
    if getattr(model.config, "tie_word_embeddings", False) or out is None:
        output = embedding
    elif isinstance(getattr(out, "weight", None), torch.Tensor):
        output = out.weight.detach()
    else:
        output = out.dequantized()
    head.bind(embedding, output)


def _pick(logits: torch.Tensor, draft_ids: torch.Tensor, vocab: int, params: GenerationParams,
          rng: torch.Generator | None) -> tuple[int, torch.Tensor | None]:
    """The drafted token id from draft-vocabulary scores [Vd], and its q over the whole
    vocabulary [vocab] when sampling."""
    if params.greedy:
        return int(draft_ids[int(logits.argmax())]), None
    full = logits.new_full((vocab,), float("-inf"))
    full[draft_ids] = logits.float()
    q = sampling.probabilities(full, params)
    return sampling.draw(q, rng), q


class _Sampling:
    """A drafter's own generator, seeded from the call's seed (offset, so draft and target
    draws differ)."""

    def __init__(self) -> None:
        self._rng: torch.Generator | None = None

    def generator(self, params: GenerationParams, device: torch.device) -> torch.Generator | None:
        if params.greedy:
            return None
        if self._rng is None:
            seed = None if params.seed is None else params.seed + 7919
            self._rng = sampling.make_generator(GenerationParams(temperature=1.0, seed=seed), device)
        return self._rng

    def reset(self) -> None:
        self._rng = None


class EagleDrafter:
    """EAGLE drafting: the head reads (feature, next token) pairs of the context, then feeds its
    own predicted feature back with each token it drafts: in a chain, or with `tree` a tree of
    candidates (a `TreeDraft`; greedy or sampled, the candidates are the head's likeliest
    tokens, which the loop's tree verification keeps lossless)."""

    method = "eagle"
    reads_features = True

    def __init__(self, head: EagleHead, model, tree: TreeShape | None = None, int8: bool = False) -> None:
        self.tree = tree
        self.head = head.eval()
        bind_to(self.head, model)
        if int8:  # the head's products (its output rows too) through torch's int8 kernel
            quantize_head(self.head)
        self.vocab = int(model.config.vocab_size)
        self._cache: HeadCache | None = None
        self._seen: list[int] = []  # the context whose pairs the cache holds
        self._confirmed = 0  # cache entries computed from the target's own features
        self._sampling = _Sampling()

    @torch.inference_mode()
    def _catch_up(self, context: Sequence[int], features: torch.Tensor) -> torch.Tensor:
        """Feed the pairs (f_i, x_{i+1}) of the confirmed positions the cache lacks; returns the
        head's output at the last one (its guess of the pending token's feature)."""
        n = len(context) - 1  # features of positions 0..n-1; context[n] is the pending token
        if self._cache is None:
            self._cache, self._seen = self.head.new_cache(), []
        # pair i is valid while context[: i + 2] is what it was computed from; keep one to rerun
        keep = max(0, min(common_prefix_length(self._seen, context) - 1, self._confirmed, n - 1))
        self._cache.crop(keep)
        device = self.head.draft_ids.device
        tokens = torch.tensor(list(context[keep + 1 : n + 1]), device=device)
        positions = torch.arange(keep, n, device=device)
        hidden = self.head(features[keep:n], tokens, positions, self._cache)  # [n - keep, d]
        self._seen, self._confirmed = list(context), n
        return hidden[-1]

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int, params: GenerationParams, *,
                features: torch.Tensor) -> Draft | TreeDraft:
        n = len(context) - 1
        if n < 1 or features.shape[0] < n:
            return Draft([])
        h = self._catch_up(context, features)
        if self.tree is not None:
            return self._grow(h, n, min(k, self.tree.depth))
        rng = self._sampling.generator(params, h.device)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        device = h.device
        for j in range(k):
            token, q = _pick(self.head.logits(h), self.head.draft_ids, self.vocab, params, rng)
            tokens.append(token)
            if q is not None:
                probs.append(q)
            if j + 1 < k:  # its own feature guess and token, one position on (the cache crops them next round)
                h = self.head(h[None], torch.tensor([token], device=device), torch.tensor([n + j], device=device),
                              self._cache)[-1]
        return Draft(tokens, torch.stack(probs) if probs else None)

    def _grow(self, h0: torch.Tensor, n: int, depth: int) -> TreeDraft:
        """EAGLE-2's dynamic tree after a context of n confirmed positions whose last head
        output is h0. Each expansion runs the chosen nodes' pairs through the head in one batch,
        each row seeing the context and its own ancestors' entries in the head's cache."""
        shape, cache, device = self.tree, self._cache, h0.device
        assert shape is not None and cache is not None
        tokens: list[int] = []
        parents: list[int] = []
        depths: list[int] = []
        scores: list[float] = []
        rows: list[int] = []  # each node's head-cache entry, once expanded (-1 before)

        def add_children(parent: int, logits: torch.Tensor, base_score: float, d: int) -> None:
            logp = torch.log_softmax(logits.float(), -1)
            top = torch.topk(logp, min(shape.branch, logp.shape[-1]))
            for lp, idx in zip(top.values.tolist(), top.indices.tolist(), strict=True):
                tokens.append(int(self.head.draft_ids[idx]))
                parents.append(parent)
                depths.append(d)
                scores.append(base_score + lp)
                rows.append(-1)

        add_children(-1, self.head.logits(h0), 0.0, 1)
        outputs: dict[int, torch.Tensor] = {-1: h0}
        for d in range(1, depth):
            frontier = [i for i in range(len(tokens)) if depths[i] == d]
            chosen = sorted(frontier, key=lambda i: -scores[i])[: shape.expand]
            if not chosen:
                break
            before = cache.length
            visible = torch.zeros(len(chosen), before + len(chosen), dtype=torch.bool, device=device)
            visible[:, :n] = True  # the confirmed context
            for r, i in enumerate(chosen):
                a = parents[i]
                while a >= 0:
                    visible[r, rows[a]] = True
                    a = parents[a]
                visible[r, before + r] = True
                rows[i] = before + r
            feats = torch.stack([outputs[parents[i]] for i in chosen])
            out = self.head(feats, torch.tensor([tokens[i] for i in chosen], device=device),
                            torch.tensor([n + d - 1] * len(chosen), device=device), cache, visible)
            logits = self.head.logits(out)
            for r, i in enumerate(chosen):
                outputs[i] = out[r]
                add_children(i, logits[r], scores[i], d + 1)
        # keep the likeliest nodes; a child never scores above its parent, so they form a tree
        keep = sorted(sorted(range(len(tokens)), key=lambda i: -scores[i])[: shape.size])
        kept = set(keep)
        keep = [i for i in keep if all(a in kept for a in _ancestors(parents, i))]
        index = {old: new for new, old in enumerate(keep)}
        cache.crop(self._confirmed)  # the next round's catch-up writes the true pairs there
        return TreeDraft([tokens[i] for i in keep], [index.get(parents[i], -1) for i in keep],
                         [depths[i] for i in keep])

    def reset(self) -> None:
        self._sampling.reset()

    def fork(self) -> EagleDrafter:
        """The same head (shared weights) with a cache of its own."""
        twin = copy.copy(self)
        twin._cache, twin._seen, twin._confirmed, twin._sampling = None, [], 0, _Sampling()
        return twin


def _ancestors(parents: list[int], node: int) -> list[int]:
    out, a = [], parents[node]
    while a >= 0:
        out.append(a)
        a = parents[a]
    return out


class MedusaDrafter:
    """Medusa drafting: head j reads the last confirmed feature and guesses the token j after
    the pending one; no state between rounds."""

    method = "medusa"
    reads_features = True

    def __init__(self, heads: MedusaHeads, model, int8: bool = False) -> None:
        self.heads = heads.eval()
        bind_to(self.heads, model)
        if int8:
            quantize_head(self.heads)
        self.vocab = int(model.config.vocab_size)
        self._sampling = _Sampling()

    @property
    def depth(self) -> int:
        return self.heads.config.depth

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int, params: GenerationParams, *, features: torch.Tensor) -> Draft:
        if features.shape[0] < 1:
            return Draft([])
        k = min(k, self.depth)
        logits = self.heads.logits(self.heads(features[-1])[:k])  # [k, Vd]
        rng = self._sampling.generator(params, logits.device)
        picks = [_pick(row, self.heads.draft_ids, self.vocab, params, rng) for row in logits]
        probs = [q for _, q in picks if q is not None]
        return Draft([t for t, _ in picks], torch.stack(probs) if probs else None)

    def reset(self) -> None:
        self._sampling.reset()

    def fork(self) -> MedusaDrafter:
        twin = copy.copy(self)
        twin._sampling = _Sampling()
        return twin


class LookupThenHead:
    """Prompt lookup where the context repeats itself (tool calls copy the prompt's names and
    values, and it drafts for free), a head everywhere else: lookup's draft when it proposes at
    least `min_tokens`, else the head's (a chain or a tree)."""

    reads_features = True

    def __init__(self, lookup, head: EagleDrafter | MedusaDrafter, min_tokens: int = 2) -> None:
        self.lookup, self.head, self.min_tokens = lookup, head, min_tokens
        self.method = f"{lookup.method}+{head.method}"

    def propose(self, context: Sequence[int], k: int, params: GenerationParams, *,
                features: torch.Tensor) -> Draft | TreeDraft:
        draft = self.lookup.propose(context, k, params)
        if len(draft.tokens) >= self.min_tokens:
            return draft
        return self.head.propose(context, k, params, features=features)

    def reset(self) -> None:
        self.lookup.reset()
        self.head.reset()

    def fork(self) -> LookupThenHead:
        return LookupThenHead(fork_drafter(self.lookup), fork_drafter(self.head), self.min_tokens)


def int8_pays(model) -> bool:
    """Whether the int8 head is the one to draft with for `model`: on a CPU torch's int8 kernel
    drafts 3-4x faster than the fp32 head at the same held-out acceptance; elsewhere it is not
    measured."""
    return model.device.type == "cpu"


def head_drafter(kind: str, model, model_name: str, *, tree: TreeShape | None = None, int8: bool = False,
                 path=None) -> EagleDrafter | MedusaDrafter:
    """The drafter of a trained head for `model` (generation/head_files.head_for finds the file:
    `path`, the user's trained one, else the shipped one): EAGLE in a chain or, with `tree`, a
    tree; or Medusa. int8: the int8 file, run on int8 kernels. ModelUnavailable, saying what to
    do, when there is no head for the model."""
    from agenttrace.generation.head_files import head_for

    loaded = head_for(kind, model, model_name, path=path, int8=int8)
    if kind == "eagle":
        return EagleDrafter(loaded.head, model, tree=tree, int8=int8)  # type: ignore[arg-type]
    return MedusaDrafter(loaded.head, model, int8=int8)  # type: ignore[arg-type]
