"""From logits to a token: the same transformation for the target and for a drafter, which is
what makes rejection sampling exact (p and q must be the distributions actually sampled from)."""

from __future__ import annotations

import torch

from agenttrace.core.chat import GenerationParams


def probabilities(logits: torch.Tensor, params: GenerationParams) -> torch.Tensor:
    """Softmax of logits [..., V] after temperature, top-k and top-p; rows sum to 1.

    Greedy (temperature 0) gives a one-hot distribution on the argmax, so greedy is just the
    limit case of sampling and the verification code needs no special path for p."""
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a [V] distribution."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


def choose(logits: torch.Tensor, params: GenerationParams, generator: torch.Generator | None) -> int:
    """The next token from [V] logits: argmax when greedy, else a seeded draw."""
    if params.greedy:
        return int(logits.argmax(-1).item())
    return draw(probabilities(logits, params), generator)


def make_generator(params: GenerationParams, device: torch.device) -> torch.Generator | None:
    if params.greedy:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(params.seed if params.seed is not None else torch.seed())
    return gen
