"""The compiled decode path (gpt-fast's recipe): a static KV cache and `torch.compile` of the
short forward passes, decode steps and verify passes.

Eager decoding of a 135M model spends more time in Python and small operators than in reading
weights (int4 on this project's CPU: about 34 ms of kernel and 40 ms of the rest per step).
Compiling the pass removes most of the rest, but `torch.compile` specialises on shapes, so every
shape the loop produces must come from a small fixed set:

- the KV cache is transformers' `StaticCache`, allocated once per call at a capacity rounded up to
  a power of two (`capacity_for`); its length is a tensor, so positions do not recompile, and
  cropping a rejected draft only moves that length back (the stale entries lie after every later
  query's position, where the causal mask hides them, and the next pass overwrites them);
- a pass of n <= `MAX_WIDTH` tokens is padded to the next of `WIDTHS`; the padding tokens come
  after the real ones, so no real row sees them, and the cache is cropped back to the real ones;
- prefill, whatever its length, and passes longer than `MAX_WIDTH` run eagerly on the same cache
  (a prefix-cached call prefills a suffix of any few tokens: compiled, each new width would cost a
  compilation inside the call).

So a capacity costs at most len(WIDTHS) compilations, recorded in `compile_s` (inductor's on-disk
graph cache, which this module points under the agenttrace cache folder, makes later processes
faster; torch decides what it can reuse). On CUDA the passes use CUDA graphs
(`mode="reduce-overhead"`), where a small model decoded eagerly is bound by kernel launches.

Identity. Attention runs per query row over the full static cache with that row's causal mask
(`static_rowwise_attention`), so a row's call is the same whatever the pass's width: a verify
pass gives each position the bits of a one-token step wherever the linear kernels do (bf16, int8,
int4 on CPU; see invariant.py), and greedy speculation stays lossless on the compiled path.
Inductor is asked to round bf16 intermediates as eager does (`emulate_precision_casts`); whether
its fused kernels then give the eager path's bits on a given model is measured, not promised
(tests/generation/test_compiled.py, BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, StaticCache
from transformers.cache_utils import StaticLayer

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.generation.invariant import ROWWISE_MAX_ROWS
from agenttrace.generation.kv import forward_kwargs

__all__ = ["MAX_WIDTH", "STATIC_ROWWISE", "WIDTHS", "CompiledDecoder", "StaticKV", "capacity_for", "compiled_view", "widths_through"]

_log = logging.getLogger(__name__)

STATIC_ROWWISE = "agenttrace_static_rowwise"
MAX_WIDTH = ROWWISE_MAX_ROWS
WIDTHS = (1, 2, 4, 8, 16, 32)  # padded pass widths: each is one compiled graph per capacity
_MIN_CAPACITY = 512
_SLACK = 2 * MAX_WIDTH  # room for a last padded verify pass past the token budget

_registered = False


def capacity_for(tokens: int, least: int = _MIN_CAPACITY) -> int:
    """The static cache capacity for a call that may hold `tokens` tokens: a power of two (at
    least `least`), so calls of similar length share compiled graphs."""
    need = max(tokens + _SLACK, least)
    return 1 << (need - 1).bit_length()


def _padded_width(n: int) -> int:
    return next(w for w in WIDTHS if w >= n)


def widths_through(tokens: int) -> list[int]:
    """The padded widths passes of 1..`tokens` tokens run at (what to warm up for drafts of
    up to `tokens` - 1 tokens)."""
    return [w for w in WIDTHS if w <= _padded_width(tokens)]


def static_rowwise_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Per query row, the grouped query heads packed as rows of one sdpa call over the whole
    static cache with that row's mask: the same call for a row in a pass of any width. Long
    passes (prefill) and anything unusual take transformers' stock sdpa."""
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    if q_len > MAX_WIDTH or batch != 1 or heads % kv_heads or dropout or any(
            kwargs.get(k) is not None for k in ("softcap", "sliding_window", "position_bias", "s_aux")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    rows = []
    for i in range(q_len):
        packed = query[:, :, i : i + 1].reshape(1, kv_heads, heads // kv_heads, dim)
        mask = attention_mask[:, :, i : i + 1] if attention_mask is not None else None
        out = F.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scaling)
        rows.append(out.reshape(1, heads, 1, dim).transpose(1, 2))
    return torch.cat(rows, dim=1), None


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def full_mask(*args, **kwargs):
        # sdpa's mask builder returns None for a causal pass it could hand to sdpa's own
        # is_causal; over a static cache the per-row calls need the mask itself (what hides the
        # unwritten and stale entries). Compiled graphs always get it; this makes eager ones too.
        kwargs["allow_is_causal_skip"] = False
        return sdpa_mask(*args, **kwargs)

    AttentionInterface.register(STATIC_ROWWISE, static_rowwise_attention)
    AttentionMaskInterface.register(STATIC_ROWWISE, full_mask)
    _registered = True


class StaticKV(StaticCache):
    """A static cache of `capacity` tokens, allocated now (not lazily in the first pass: a
    first update inside a compiled graph would leave later graphs reading the wrong tensors)."""

    def __init__(self, model: PreTrainedModel, capacity: int) -> None:
        config = model.config.get_text_config(decoder=True)
        super().__init__(config=config, max_cache_len=capacity)
        self.capacity = capacity
        if not all(type(layer) is StaticLayer for layer in self.layers):
            raise ValueError("compiled decoding needs full-attention layers (no sliding window or hybrid cache)")
        heads = config.num_key_value_heads or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # keys and values come out of the projections in the activations' dtype: the embeddings'
        dtype = model.get_input_embeddings().weight.dtype
        self.early_initialization(1, heads, head_dim, dtype, model.device)

    def length(self) -> int:
        return int(self.get_seq_length())


def _inductor_cache_under_ours() -> None:
    # Inductor keeps compiled graphs on disk in $TORCHINDUCTOR_CACHE_DIR (a /tmp folder by
    # default, gone at reboot); next to the converted models they survive. A user's own setting
    # wins; torch writes its default into the variable once it has looked, so that counts as unset.
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # a torch that moved it: leave the cache where that torch keeps it
        return
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) == default_cache_dir():
        from agenttrace.generation.models import cache_dir

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor")


def _own_attention_view(model: PreTrainedModel) -> PreTrainedModel:
    """A copy of `model` that shares every tensor but has its own config, so choosing its
    attention leaves the caller's model (still decoding eagerly elsewhere) as it was."""
    import copy

    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo=tensors)


@dataclass
class CompiledDecoder:
    """`model` with compiled short passes (see the module docstring); the loop takes it where it
    takes a model. `compile_s` holds each (capacity, width) graph's first-call seconds.
    `min_capacity`: the smallest cache it allocates; one size for every call of a workload
    means one set of graphs (shorter calls then attend over more empty entries)."""

    model: PreTrainedModel
    mode: str | None = None
    min_capacity: int = _MIN_CAPACITY
    compile_s: dict[tuple[int, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _register()
        _inductor_cache_under_ours()
        self.model = _own_attention_view(self.model)
        self.model.set_attn_implementation(STATIC_ROWWISE)
        if self.mode is None and self.model.device.type == "cuda":
            self.mode = "reduce-overhead"  # CUDA graphs: one launch per pass instead of hundreds
        # Dynamo's default of 8 graphs per function is fewer than the widths times a few capacities.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        self._cache_kw = forward_kwargs(type(self.model))[0]
        self._compiled = torch.compile(self.model, mode=self.mode, dynamic=False,
                                       options=None if self.mode else {"emulate_precision_casts": True})

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def config(self):
        return self.model.config

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def new_cache(self, tokens: int) -> StaticKV:
        """An empty cache for a call that may hold `tokens` tokens (prompt and budget)."""
        return StaticKV(self.model, capacity_for(tokens, self.min_capacity))

    def _eager(self, ids: list[int], cache: StaticKV, last_only: bool) -> torch.Tensor:
        if cache.length() + len(ids) > cache.capacity:
            raise ValueError(f"static cache of {cache.capacity} tokens cannot take {len(ids)} more after "
                             f"{cache.length()}: the call's capacity was sized for fewer tokens")
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        logits = self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1 if last_only else 0,
                            **{self._cache_kw: cache}).logits[0]
        return (logits[-1:] if last_only else logits).float()

    def prefill(self, ids: list[int], cache: StaticKV) -> torch.Tensor:
        """`kv.prefill` on the static cache, eagerly at any length: the last row's float logits.
        Prefills are one per call and of any length; compiling them would add a graph per
        suffix width the prefix cache leaves (tens of seconds each, inside the call)."""
        return self._eager(ids, cache, last_only=True)

    def forward(self, ids: list[int], cache: StaticKV, last_only: bool = False) -> torch.Tensor:
        """`kv.forward` on the static cache: float logits [n, vocab] (or the last row). Passes
        of up to MAX_WIDTH tokens run compiled, longer ones eagerly."""
        n = len(ids)
        base = cache.length()
        if n > MAX_WIDTH:
            return self._eager(ids, cache, last_only)
        width = _padded_width(n)
        if base + width > cache.capacity:
            raise ValueError(f"static cache of {cache.capacity} tokens cannot take {width} more after {base}: "
                             "the call's capacity was sized for fewer tokens")
        padded = list(ids) + [ids[-1]] * (width - n)  # after the real tokens, so no real row sees them
        input_ids = torch.tensor([padded], dtype=torch.long, device=self.device)
        key = (cache.capacity, width)
        first = key not in self.compile_s
        clock = default_clock()
        start = clock.now_ns()
        logits = self._compiled(input_ids=input_ids, use_cache=True, **{self._cache_kw: cache}).logits[0, :n]
        if first:
            self.compile_s[key] = elapsed_s(clock, start)
            _log.info("compiled the %d-token pass for a %d-token cache in %.1f s", width, cache.capacity,
                      self.compile_s[key])
        if width > n:
            cache.crop(-(width - n))  # the cache holds exactly the real tokens, as the eager path's does
        out = (logits[-1:] if last_only else logits).float()
        return out.clone() if self.mode == "reduce-overhead" else out  # CUDA graphs reuse their output buffers

    def warm_up(self, tokens: Iterable[int], widths: Iterable[int] = WIDTHS) -> float:
        """Compile the passes calls of these lengths will need, before any is timed; returns
        the seconds it took."""
        clock = default_clock()
        start = clock.now_ns()
        with torch.inference_mode():
            for capacity in sorted({capacity_for(t, self.min_capacity) for t in tokens}):
                for width in widths:
                    if (capacity, width) in self.compile_s:
                        continue
                    self.forward([0] * width, StaticKV(self.model, capacity))
        return elapsed_s(clock, start)


def compiled_view(model: PreTrainedModel, mode: str | None = None, min_capacity: int = _MIN_CAPACITY) -> CompiledDecoder:
    """`model` with compiled decode and verify passes; ValueError (saying why) for a model the
    static cache does not fit, which then decodes eagerly."""
    StaticKV(model, _MIN_CAPACITY)  # refuses sliding-window and hybrid models early
    return CompiledDecoder(model, mode, min_capacity=capacity_for(0, min_capacity))
