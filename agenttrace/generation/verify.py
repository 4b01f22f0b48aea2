"""How the target model accepts or rejects a draft.

Both functions take the target's scores for the k+1 positions of one verify pass: position i
scores the token after (pending token, d_1 .. d_i). They return how many draft tokens to keep and
the one extra token the target contributes (the correction on a rejection, the bonus when all k
were accepted), so every round yields at least one token.
"""

from __future__ import annotations

import torch


def verify_greedy(draft: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Keep the longest draft prefix equal to the target's argmax; add the target's next argmax.

    Output is token-for-token what plain greedy decoding would give: each kept token is the
    target's own argmax given the same prefix.
    target_logits: [len(draft) + 1, vocab]
    """
    best = target_logits.argmax(-1).tolist()  # [k+1]
    accepted = 0
    while accepted < len(draft) and draft[accepted] == best[accepted]:
        accepted += 1
    return accepted, best[accepted]


def verify_sampled(
    draft: list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """Modified rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

    Accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw the
    correction from norm(max(0, p_i - q_i)); if all are accepted draw the bonus from p_{k+1}.
    The kept tokens are then distributed exactly as the target's own samples.
    draft_probs: [k, vocab] or None when the drafter is deterministic (q one-hot on d_i);
    target_probs: [k+1, vocab], already transformed (temperature, top-k, top-p) like q.
    """
    k = len(draft)
    if k == 0:
        return 0, int(torch.multinomial(target_probs[0], 1, generator=generator).item())
    idx = torch.arange(k, device=target_probs.device)
    tokens = torch.tensor(draft, device=target_probs.device)
    p = target_probs[idx, tokens]  # [k]
    q = draft_probs[idx, tokens] if draft_probs is not None else torch.ones_like(p)
    u = torch.rand(k, generator=generator, device=target_probs.device)
    # u < p/q written as u*q < p so q = 0 (impossible under the drafter) never divides.
    rejected = (u * q >= p).nonzero()
    accepted = int(rejected[0].item()) if len(rejected) else k
    if accepted == k:
        return k, int(torch.multinomial(target_probs[k], 1, generator=generator).item())
    if draft_probs is None:
        residual = target_probs[accepted].clone()
        residual[draft[accepted]] = 0.0  # max(0, p - onehot(d)) zeroes d and keeps the rest
    else:
        residual = (target_probs[accepted] - draft_probs[accepted]).clamp_min(0.0)
    total = residual.sum()
    if total <= 0:  # p == q exactly: any rejection is measure-zero, fall back to p
        residual, total = target_probs[accepted], target_probs[accepted].sum()
    return accepted, int(torch.multinomial(residual / total, 1, generator=generator).item())
