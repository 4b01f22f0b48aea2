"""The decoding loop and its parts: prefill and forward passes over a KV cache, sampling,
drafters, verification. Plain functions over tensors; importing this package imports torch.

    kv.py        forward passes and KV-cache bookkeeping (prefill, crop)
    sampling.py  logits -> probabilities (temperature, top-k, top-p) and draws
    drafters.py  what proposes draft tokens (prompt lookup, ...)
    verify.py    how the target accepts or rejects a draft (greedy, rejection sampling)
    loop.py      the generation loop tying them together, with its timings
    local.py     a `ChatModel` over a local transformers model and tokenizer
"""
