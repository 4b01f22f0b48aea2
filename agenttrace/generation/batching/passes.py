"""One forward pass over the tokens of several requests, each with its own KV cache.

The requests' new tokens are packed into one sequence [1, T] (ragged: a decode step adds one row,
a verify pass k + 1, a prefill chunk up to its chunk size), so every linear layer reads its
weights once for all of them: on a CPU, as on a GPU at small batch, that read is the cost of a
decode step, and sharing it is what batching gains. Attention is the part that must not mix
requests: a `PackedCache` routes each segment's keys and values to its request's own cache, and
the attention function registered here attends each segment's queries over its own cache only,
by the very call (same function, shapes and mask) a pass of that request alone would make; so a
request's logits do not depend on who shares its pass wherever the linear kernels give each row
the same bits whatever the row count (the bf16 and quantized variants on this project's CPUs,
see invariant.py; fp32 kernels differ in the last bits between row counts, as for verify passes).

The attention function is registered with transformers' `AttentionInterface` under a name that
wraps the model's own implementation (`agenttrace_batched:<inner>`): a pass without a batch
layout goes straight to the inner one, so switching a model costs nothing to its other users.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import Cache, PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from agenttrace.generation.invariant import ROWWISE
from agenttrace.generation.kv import forward_kwargs

__all__ = ["Segment", "PackedOutput", "batched_forward", "enable_batching"]

_PREFIX = "agenttrace_batched:"
_KWARG = "agenttrace_batch"


@dataclass
class Segment:
    """One request's part of a pass: `ids` after what `cache` holds. positions/visible: a draft
    tree's (as kv.forward_features takes them); None: the next positions, causally.
    logit_rows: which of its rows need logits (indices into ids); None: all."""

    cache: Cache
    ids: list[int]
    logit_rows: list[int] | None = None
    positions: torch.Tensor | None = None
    visible: torch.Tensor | None = None
    start: int = 0  # filled in by the pass: where its rows sit in the packed sequence
    cached: int = 0  # filled in: the cache's length before the pass
    mask: torch.Tensor | None = field(default=None, repr=False)


@dataclass
class PackedOutput:
    """Per segment: float logits of its logit rows [r, vocab], and its features (the final
    norm's output) of all its rows [n, d] when asked for."""

    logits: list[torch.Tensor]
    hidden: list[torch.Tensor] | None


class _Layout:
    """What the attention function reads during one pass: the segments and their caches' full
    keys and values, per layer, as the PackedCache stored them."""

    def __init__(self, segments: Sequence[Segment], inner: str) -> None:
        self.segments = segments
        self.inner = inner
        self.kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}


class PackedCache:
    """Stands in for a cache during a packed pass: `update` appends each segment's slice of the
    new keys and values to that segment's own cache and keeps the full ones for attention."""

    is_compileable = False

    def __init__(self, layout: _Layout) -> None:
        self.layout = layout

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        full = []
        for seg in self.layout.segments:
            end = seg.start + len(seg.ids)
            full.append(seg.cache.update(key_states[:, :, seg.start:end], value_states[:, :, seg.start:end], layer_idx))
        self.layout.kv[layer_idx] = full
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always passed explicitly

    def __len__(self) -> int:
        return 0


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    layout: _Layout | None = kwargs.pop(_KWARG, None)
    inner_name = layout.inner if layout is not None else module.config._attn_implementation[len(_PREFIX):]
    inner = ALL_ATTENTION_FUNCTIONS[inner_name]
    if layout is None:
        return inner(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    outs = []
    for seg, (k, v) in zip(layout.segments, layout.kv[module.layer_idx], strict=True):
        q = query[:, :, seg.start : seg.start + len(seg.ids)]
        out, _ = inner(module, q, k, v, seg.mask, dropout=dropout, scaling=scaling, **kwargs)
        outs.append(out)  # [1, n, heads, dim]
    return torch.cat(outs, dim=1), None


def enable_batching(model: PreTrainedModel) -> str:
    """Switch `model` to the batching attention wrapping its current implementation (idempotent);
    returns the inner implementation's name. ValueError for a model transformers cannot switch."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    current = model.config._attn_implementation or "eager"
    if current.startswith(_PREFIX):
        return current[len(_PREFIX):]
    if current == "eager":
        raise ValueError("batching needs an sdpa-style attention implementation; load the model with "
                         "attn_implementation='sdpa'")
    name = _PREFIX + current
    AttentionInterface.register(name, _attention)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[current])
    try:
        model.set_attn_implementation(name)
    except (ValueError, AttributeError, NotImplementedError) as exc:
        raise ValueError(f"{type(model).__name__} cannot switch its attention implementation: {exc}") from exc
    return current


def _segment_mask(seg: Segment, inner: str, device: torch.device) -> torch.Tensor | None:
    """The mask a pass of this segment alone gets: None where transformers would skip it (one
    row, or a pass over an empty cache: causal by `is_causal`), else [1, 1, n, cached + n] bool."""
    n, total = len(seg.ids), seg.cached + len(seg.ids)
    if seg.visible is not None:
        return seg.visible.to(device)[None, None]
    if n == 1 or seg.cached == 0:
        return None
    if inner == ROWWISE:
        return None  # row-wise attention reads a causal pass from its shape alone
    rows = torch.arange(n, device=device)[:, None] + seg.cached
    return (torch.arange(total, device=device)[None, :] <= rows)[None, None]


def batched_forward(model: PreTrainedModel, segments: Sequence[Segment], *, features: bool = False) -> PackedOutput:
    """Run every segment's ids after its cache in one pass (see the module docstring); each cache
    grows by its segment's tokens. The model must have been switched by `enable_batching`."""
    inner = model.config._attn_implementation
    if not inner.startswith(_PREFIX):
        raise ValueError("call enable_batching(model) before batched passes")
    layout = _Layout(segments, inner[len(_PREFIX):])
    device = model.device
    ids, positions, start = [], [], 0
    for seg in segments:
        seg.start = start
        seg.cached = int(seg.cache.get_seq_length())
        seg.mask = _segment_mask(seg, layout.inner, device)
        ids.extend(seg.ids)
        positions.append(seg.positions.to(device) if seg.positions is not None
                         else torch.arange(seg.cached, seg.cached + len(seg.ids), device=device))
        start += len(seg.ids)
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    position_ids = torch.cat(positions)[None]
    dummy = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)  # 4-D: transformers builds no mask
    inner_model = model.model
    cache_kw, _ = forward_kwargs(type(inner_model))
    kwargs = {cache_kw: PackedCache(layout), _KWARG: layout}
    hidden = inner_model(input_ids=input_ids, position_ids=position_ids, attention_mask=dummy, use_cache=True,
                         **kwargs).last_hidden_state[0]
    rows = [seg.start + r for seg in segments
            for r in (seg.logit_rows if seg.logit_rows is not None else range(len(seg.ids)))]
    logits = model.lm_head(hidden[rows]).float() if rows else hidden.new_zeros(0, 0)
    out, at = [], 0
    for seg in segments:
        n = len(seg.logit_rows) if seg.logit_rows is not None else len(seg.ids)
        out.append(logits[at : at + n])
        at += n
    per_seg = [hidden[seg.start : seg.start + len(seg.ids)] for seg in segments] if features else None
    return PackedOutput(out, per_seg)
