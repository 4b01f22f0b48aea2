"""Attention whose result for a token does not depend on how many tokens share the pass.

Greedy speculative decoding is lossless only if the logits a verify pass gives for a position are
the ones a plain one-token step would give there. In fp32 the kernels differ in the last bits
between a 1-row and a 9-row pass, which almost never flips an argmax. With bf16 activations (the
bf16, int8 and int4 weight variants) every layer rounds its input to 8 mantissa bits, and such a
last-bit difference becomes a 0.4% change of one input now and then: greedy text then changed
with the verify widths the adaptive controller chose, run to run.

On this project's CPUs the bf16 linear kernels and torch's packed int8/int4 kernels give each row
the same bits whatever the number of rows (tests/generation/test_quantize.py checks it), and norms, rotary
embeddings and activations work per row; attention is what mixes a pass's rows. This attention
computes a short pass (up to `ROWWISE_MAX_ROWS` queries: decode and verify) one query at a time,
each over exactly the keys it may see, by the same sdpa call a one-token step makes there: so each
row's bits are those of plain decoding. Longer passes (prefill) take the stock sdpa path in one
call, for both plain and speculative decoding alike.

Registered with transformers' own `AttentionInterface` / `AttentionMaskInterface` under
`ROWWISE`; a model opts in with `model.set_attn_implementation(ROWWISE)`.
"""

from __future__ import annotations

import torch

__all__ = ["ROWWISE", "ROWWISE_MAX_ROWS", "register", "use_rowwise_attention"]

ROWWISE = "agenttrace_rowwise"
ROWWISE_MAX_ROWS = 32  # above this a pass is a prefill: per-row calls would cost more than they save

_registered = False


def _visible_prefix(mask: torch.Tensor | None, row: int, q_len: int, kv_len: int) -> int | torch.Tensor | None:
    """How many leading keys query `row` sees; for a draft tree's row, which keys (the context,
    its ancestors, itself: gathered, they are the keys a one-token step at its place sees, in
    the same order); None when it sees nothing (a padding row: the caller takes the stock path)."""
    causal_end = kv_len - q_len + row + 1
    if mask is None:
        return causal_end
    m = mask[0, 0, row] if mask.dim() == 4 else mask[row]
    visible = m if m.dtype == torch.bool else m == 0
    count = int(visible.sum())
    if not count:
        return None
    if bool(visible[:count].all()):
        return count
    return visible.nonzero()[:, 0]


_last: tuple = (None, 0, 0, [])  # (mask, q_len, kv_len, ends) of the previous layer's call


def _visible_prefixes(mask: torch.Tensor | None, q_len: int, kv_len: int) -> list[int | torch.Tensor | None]:
    """Each query row's visible prefix. Every layer of one forward pass gets the same mask
    object, so the rows are read from it once per pass, not once per layer (the tuple holds the
    mask, so its identity cannot be reused by another tensor meanwhile)."""
    global _last
    last_mask, last_q, last_kv, ends = _last
    if mask is not None and mask is last_mask and (q_len, kv_len) == (last_q, last_kv):
        return ends
    ends = [_visible_prefix(mask, i, q_len, kv_len) for i in range(q_len)]
    _last = (mask, q_len, kv_len, ends)
    return ends


def _one_query(query, key, value, scaling):
    """Attention of one query position over `key`/`value` [1, kv heads, L, dim]: the query heads
    that share a KV head become rows of one product (what transformers' sdpa path does for a
    one-token step with grouped KV heads), a path bf16 serves 5x faster on a CPU than sdpa's
    `enable_gqa` kernel (measured: 129 against 683 us per layer at 434 keys)."""
    import torch.nn.functional as F

    heads, dim, kv_heads = query.shape[1], query.shape[-1], key.shape[1]
    packed = query.reshape(1, kv_heads, heads // kv_heads, dim)  # head h reads KV head h // group
    out = F.scaled_dot_product_attention(packed, key, value, scale=scaling)
    return out.reshape(1, heads, 1, dim).transpose(1, 2)  # [1, 1, heads, dim], as attention functions return


def rowwise_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    stock = q_len > ROWWISE_MAX_ROWS or batch != 1 or heads % key.shape[1] or dropout or any(
        kwargs.get(k) is not None for k in ("softcap", "sliding_window", "position_bias", "s_aux"))
    ends = [] if stock else _visible_prefixes(attention_mask, q_len, kv_len)
    if stock or any(e is None for e in ends):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    # A one-token step goes through here as well, so its call is the very one each row makes.
    rows = [_one_query(query[:, :, i : i + 1], key[:, :, :end], value[:, :, :end], scaling) if isinstance(end, int)
            else _one_query(query[:, :, i : i + 1], key.index_select(2, end), value.index_select(2, end), scaling)
            for i, end in enumerate(ends)]
    return torch.cat(rows, dim=1), None


def register() -> None:
    """Make `ROWWISE` known to transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ROWWISE, rowwise_attention_forward)
    AttentionMaskInterface.register(ROWWISE, sdpa_mask)
    _registered = True


def use_rowwise_attention(model) -> bool:
    """Switch `model` to row-wise attention; False (nothing changed) for a model whose attention
    transformers cannot switch (it keeps its own kernels, and the identity is then not promised)."""
    register()
    try:
        model.set_attn_implementation(ROWWISE)
    except (ValueError, AttributeError, NotImplementedError):
        return False
    return True
