"""The decoding loop and its parts: prefill and forward passes over a KV cache, sampling,
drafters, verification. Plain functions over tensors. This package's own import loads nothing;
its modules import torch, except adaptive.py (the speculation cost model is core/costmodel.py).

    kv.py        forward passes and KV-cache bookkeeping (prefill, crop)
    sampling.py  logits -> probabilities (temperature, top-k, top-p) and draws
    drafters.py  what proposes draft tokens (prompt lookup, ...)
    verify.py    how the target accepts or rejects a draft (greedy, rejection sampling)
    adaptive.py  the k controller: chooses k per round from the cost model, falls back
    round.py     one decode round as plain functions (draft, verify by chain or tree, accept,
                 roll back, finish checks), shared by the loop and the batching engine
    loop.py      `generate`: prefill, then rounds until a stop, with its timings
    device.py    what waits for a device, its synchronised clock and its measured peaks
    local.py     a `ChatModel` over a local transformers model and tokenizer
"""
