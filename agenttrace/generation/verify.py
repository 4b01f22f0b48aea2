"""How the target model accepts or rejects a draft.

Both rules take the target's scores for the k+1 positions of one verify pass: position i scores
the token after (pending token, d_1 .. d_i). They return how many draft tokens to keep and the one
extra token the target contributes (the correction on a rejection, the bonus when all k were
accepted), so every round yields at least one token.
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


def verify_sampled_batch(
    draft: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling (Leviathan et al. 2023; Chen et al. 2023), for B drafts at once.

    Accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw the
    correction from norm(max(0, p_i - q_i)); if all k are accepted draw the bonus from p_{k+1}.
    The kept tokens plus the extra one are distributed exactly as tokens sampled from the target
    alone would be (the invariant the losslessness test checks).

    draft: [B, k] token ids; draft_probs: [B, k, V] (q) or None for a deterministic drafter, whose
    q is one-hot on each d_i; target_probs: [B, k+1, V] (p), already transformed (temperature,
    top-k, top-p) exactly as q was. Returns (accepted [B], extra token [B]).
    """
    b, k = draft.shape
    rows = torch.arange(b, device=draft.device)
    if k == 0:
        return torch.zeros(b, dtype=torch.long, device=draft.device), torch.multinomial(
            target_probs[:, 0], 1, generator=generator
        )[:, 0]
    p = target_probs[:, :k].gather(-1, draft.unsqueeze(-1))[..., 0]  # [B, k]
    q = draft_probs.gather(-1, draft.unsqueeze(-1))[..., 0] if draft_probs is not None else torch.ones_like(p)
    u = torch.rand(b, k, generator=generator, device=draft.device)
    # u < p/q written as u*q < p so that q = 0 (impossible under the drafter) never divides.
    ok = u * q < p  # [B, k]
    # accepted = length of the all-ok prefix: the first False, or k when there is none.
    accepted = torch.where(ok.all(-1), k, (~ok).int().argmax(-1))  # [B]
    # The distribution the extra token is drawn from: the bonus p_{k+1} when all were accepted,
    # else the residual norm(max(0, p_a - q_a)) at the first rejected position a.
    at = accepted.clamp(max=k - 1)
    p_at = target_probs[rows, accepted]  # [B, V] (position k is the bonus distribution)
    if draft_probs is None:
        residual = target_probs[rows, at].scatter(-1, draft[rows, at].unsqueeze(-1), 0.0)
    else:
        residual = (target_probs[rows, at] - draft_probs[rows, at]).clamp_min(0.0)
    mass = residual.sum(-1, keepdim=True)
    # p == q exactly leaves no residual mass; a rejection is then a measure-zero event, draw from p.
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), target_probs[rows, at])
    dist = torch.where((accepted == k).unsqueeze(-1), p_at, residual)
    return accepted, torch.multinomial(dist, 1, generator=generator)[:, 0]


def verify_sampled(
    draft: list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """`verify_sampled_batch` for one sequence. draft_probs: [k, V] or None; target_probs: [k+1, V]."""
    d = torch.tensor([draft], dtype=torch.long, device=target_probs.device)  # [1, k]
    q = draft_probs.unsqueeze(0) if draft_probs is not None else None
    accepted, extra = verify_sampled_batch(d, q, target_probs.unsqueeze(0), generator)
    return int(accepted[0]), int(extra[0])
