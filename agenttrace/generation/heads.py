"""Trained draft heads that read the target's own hidden states: an EAGLE feature head and
Medusa heads. Plain torch, no transformers: a head is a few small matrices and the hot path is a
handful of products per drafted token.

Both read `f_t`, the target's last hidden state at position t after its final norm (what its LM
head multiplies, so `lm_head(f_t)` are the target's logits for token t+1), and both score tokens
through the target's own output table restricted to a reduced draft vocabulary (`draft_ids`,
the target ids that carry most of the training data's mass): a draft never proposes a token
outside it, and its output product costs |draft vocab| / |vocab| of the target's.

EAGLE (Li et al. 2024): one decoder layer over the pairs (f_t, embedding of token t+1), through a
fused projection `fc`, predicts f_{t+1}; drafting feeds its own prediction back with the token it
drafted, so depth d costs d head steps. The layer attends over every earlier pair, so the head
keeps a KV cache of its own (`HeadCache`) beside the target's.

Medusa (Cai et al. 2024): K residual blocks on f_t, block j predicting token t+1+j (the target's
own head gives t+1). No cache and no feedback: all depths come from one feature.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["EagleHead", "HeadCache", "HeadConfig", "MedusaHeads", "frozen_rows", "init_eagle", "quantize_head", "rms_norm",
           "rotary"]


@dataclass(frozen=True)
class HeadConfig:
    """The shapes of a head; EAGLE's decoder layer copies the target's layer shapes."""

    kind: str  # "eagle" or "medusa"
    hidden: int  # the target's hidden size (feature width)
    vocab: int  # the target's vocabulary
    draft_vocab: int  # how many target tokens the head can propose
    heads: int = 0  # EAGLE: query heads of its layer
    kv_heads: int = 0  # EAGLE: key/value heads (grouped-query attention)
    head_dim: int = 0
    intermediate: int = 0  # EAGLE: the MLP's inner width
    rope_theta: float = 10000.0
    eps: float = 1e-5
    depth: int = 0  # Medusa: how many heads (tokens t+2 .. t+1+depth)

    def to_json(self) -> dict:
        return asdict(self)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # in fp32 whatever x is, as Llama does: the variance of bf16 rows loses too much
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate x [..., n, head_dim] by its positions [n] (Llama's half-split rotary embedding)."""
    dim = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))  # [dim/2]
    angles = positions.to(torch.float32)[:, None] * inv[None, :]  # [n, dim/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(x.dtype)  # [n, dim]
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(x.dtype)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class HeadCache:
    """The EAGLE head's keys and values [kv_heads, length, head_dim], grown by doubling.
    `crop(n)` keeps the first n entries (a rejected draft's entries go, as in the target's)."""

    def __init__(self, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.keys = torch.empty(kv_heads, 64, head_dim, dtype=dtype, device=device)
        self.values = torch.empty_like(self.keys)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add k, v [kv_heads, n, head_dim]; returns every entry so far."""
        n = k.shape[1]
        if self.length + n > self.keys.shape[1]:
            cap = 1 << (self.length + n - 1).bit_length()
            for name in ("keys", "values"):
                old = getattr(self, name)
                new = torch.empty(old.shape[0], cap, old.shape[2], dtype=old.dtype, device=old.device)
                new[:, : self.length] = old[:, : self.length]
                setattr(self, name, new)
        self.keys[:, self.length : self.length + n] = k
        self.values[:, self.length : self.length + n] = v
        self.length += n
        return self.keys[:, : self.length], self.values[:, : self.length]

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)

    def keep(self, base: int, rows: list[int]) -> None:
        """Keep entries [0, base) and then the entries at `rows` (>= base, in order): a tree's
        accepted path moved next to the confirmed context."""
        if rows:
            idx = torch.tensor(rows, device=self.keys.device)
            self.keys[:, base : base + len(rows)] = self.keys[:, idx]
            self.values[:, base : base + len(rows)] = self.values[:, idx]
        self.length = base + len(rows)


class EagleHead(nn.Module):
    """fc(concat(embedding(token), feature)) through one Llama decoder layer: the next feature.

    `bind(embedding, output)` hands it the target's embedding table and output table (shared,
    not copied: they are not part of the head's file); `draft_ids` selects the output rows."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        d, hd = c.hidden, c.head_dim
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.norm_in = nn.Parameter(torch.ones(d))
        self.q = nn.Linear(d, c.heads * hd, bias=False)
        self.k = nn.Linear(d, c.kv_heads * hd, bias=False)
        self.v = nn.Linear(d, c.kv_heads * hd, bias=False)
        self.o = nn.Linear(c.heads * hd, d, bias=False)
        self.norm_mlp = nn.Parameter(torch.ones(d))
        self.gate = nn.Linear(d, c.intermediate, bias=False)
        self.up = nn.Linear(d, c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, d, bias=False)
        self.register_buffer("draft_ids", torch.arange(c.draft_vocab, dtype=torch.long))
        self.embedding: torch.Tensor | None = None
        _set_out(self, None)  # the target's output rows of the draft vocabulary, once bound

    def bind(self, embedding: torch.Tensor, output: torch.Tensor) -> None:
        """The target's input embedding [vocab, d] (shared as it is: rows are cast when read)
        and output table [vocab, d] (the same tensor when tied), of which the head keeps the
        draft vocabulary's rows as a frozen layer of its own dtype."""
        self.embedding = embedding.detach()
        _set_out(self, frozen_rows(output, self.draft_ids, torch.float32))

    def new_cache(self) -> HeadCache:
        c = self.config
        return HeadCache(c.kv_heads, c.head_dim, torch.float32, self.draft_ids.device)

    def inputs(self, features: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The layer's input [n, d] for pairs (features [n, d], tokens [n])."""
        assert self.embedding is not None, "bind() the target's tables first"
        # activations are fp32 (an int8 head's layers take them so, and give them back so)
        return self.fc(torch.cat([self.embedding[tokens].float(), features.float()], -1))

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated queries [heads, n, hd], keys and values [kv_heads, n, hd] of inputs x [n, d]."""
        c = self.config
        h = rms_norm(x, self.norm_in, c.eps)
        n = h.shape[0]
        q = self.q(h).view(n, c.heads, c.head_dim).transpose(0, 1)
        k = self.k(h).view(n, c.kv_heads, c.head_dim).transpose(0, 1)
        v = self.v(h).view(n, c.kv_heads, c.head_dim).transpose(0, 1)
        return rotary(q, positions, c.rope_theta), rotary(k, positions, c.rope_theta), v

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The layer's output [n, d] from its input x and the attention's output [heads, n, hd]."""
        c = self.config
        n = x.shape[0]
        x = x + self.o(attended.transpose(0, 1).reshape(n, c.heads * c.head_dim))
        h = rms_norm(x, self.norm_mlp, c.eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                cache: HeadCache | None = None, visible: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted next features [n, d] for pairs (features [n, d], tokens [n]) at `positions`
        [n], after what `cache` holds (None: the n pairs alone, causally, as in training).
        visible: [n, cached + n] bool, which entries each row attends to (a draft tree's rows see
        the context and their own ancestors); None is causal."""
        c = self.config
        x = self.inputs(features, tokens)
        q, k, v = self.qkv(x, positions)
        n = x.shape[0]
        before = 0
        if cache is not None:
            before = cache.length
            k, v = cache.append(k, v)
        if visible is None:
            visible = torch.ones(n, before + n, dtype=torch.bool, device=x.device).tril(before)
        group = c.heads // c.kv_heads
        # the query heads sharing a KV head become rows of one product: [kv, group * n, hd]
        qg = q.reshape(c.kv_heads, group * n, c.head_dim)
        att = F.scaled_dot_product_attention(qg, k, v, attn_mask=visible.repeat(group, 1))  # [kv, group*n, hd]
        return self.finish(x, att.reshape(c.heads, n, c.head_dim))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores over the draft vocabulary [..., draft_vocab] (index with `draft_ids` for ids)."""
        assert self.out is not None, "bind() the target's tables first"
        return self.out(hidden)


class MedusaHeads(nn.Module):
    """K residual blocks on the target's feature f_t; block j scores token t+1+j."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(config.depth))
        for block in self.blocks:  # start as the identity: block j first guesses what f_t guesses
            nn.init.zeros_(block.weight)
            nn.init.zeros_(block.bias)
        self.register_buffer("draft_ids", torch.arange(config.draft_vocab, dtype=torch.long))
        _set_out(self, None)

    def bind(self, embedding: torch.Tensor, output: torch.Tensor) -> None:
        del embedding  # Medusa reads no token
        _set_out(self, frozen_rows(output, self.draft_ids, torch.float32))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Hidden states [depth, ..., d] of tokens t+2 .. t+1+depth from features [..., d]."""
        f = features.float()
        return torch.stack([f + F.silu(block(f)) for block in self.blocks])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.out is not None, "bind() the target's tables first"
        return self.out(hidden)


def _set_out(head: nn.Module, layer: nn.Module | None) -> None:
    # Not a registered submodule: the rows are the target's, so they stay out of the head's
    # state dict, its file and its optimizer.
    object.__setattr__(head, "out", layer)


def frozen_rows(table: torch.Tensor, rows: torch.Tensor, dtype: torch.dtype) -> nn.Linear:
    """A bias-free linear layer scoring `rows` of `table` [vocab, d], not trained."""
    layer = nn.Linear(table.shape[1], len(rows), bias=False, dtype=dtype, device=table.device)
    layer.weight = nn.Parameter(table.detach()[rows.to(table.device)].to(dtype).contiguous(), requires_grad=False)
    return layer


def quantize_head(head: EagleHead | MedusaHeads) -> int:
    """Run the head's products in int8 (torch's packed kernel, bf16 activations; outputs in
    the input's dtype), its output rows included: bind() first. Returns how many layers."""
    from agenttrace.generation.quantize import Int8Linear, _replace_linears

    assert head.out is not None, "bind() the target's tables first: the output rows are quantized too"
    _set_out(head, Int8Linear.from_linear(head.out))
    return _replace_linears(head, Int8Linear.from_linear) + 1


def init_eagle(config: HeadConfig, seed: int) -> EagleHead:
    """A fresh EAGLE head: Llama's initialisation, and `fc` starting as 'the feature plus a
    little of the token' so early training refines the target's own guess."""
    gen = torch.Generator().manual_seed(seed)
    head = EagleHead(config)
    d = config.hidden
    with torch.no_grad():
        for lin in (head.q, head.k, head.v, head.o, head.gate, head.up, head.down):
            lin.weight.normal_(0.0, 0.02, generator=gen)
        head.o.weight.mul_(1 / math.sqrt(2))
        head.fc.weight.normal_(0.0, 0.02, generator=gen)
        head.fc.weight[:, d:].add_(torch.eye(d))
        head.fc.bias.zero_()
    return head
