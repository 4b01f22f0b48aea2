"""The decoding loop and its parts: prefill and forward passes over a KV cache, sampling,
drafters, verification. Plain functions over tensors. This package's own import loads nothing;
its modules import torch, except costmodel.py and adaptive.py (the report reads costmodel.py).

    kv.py        forward passes and KV-cache bookkeeping (prefill, crop)
    sampling.py  logits -> probabilities (temperature, top-k, top-p) and draws
    drafters.py  what proposes draft tokens (prompt lookup, ...)
    verify.py    how the target accepts or rejects a draft (greedy, rejection sampling)
    costmodel.py what speculation gains by k: tokens per round, draft and verify cost (torch-free)
    adaptive.py  the k controller: chooses k per round from the cost model, falls back
    loop.py      the generation loop tying them together, with its timings
    local.py     a `ChatModel` over a local transformers model and tokenizer
"""
