"""Speculation what-if: from each drafter's measured acceptance and cost, the expected speedup for
k = 1..10 draft tokens, the best k, and how far the run's k was from it.

The model is Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative
Decoding"): with per-token acceptance probability alpha (i.i.d.) and c the cost of drafting one
token relative to one target forward pass, a round of k drafts yields on average
(1 - alpha^(k+1)) / (1 - alpha) tokens per target pass, and the expected wall-time speedup over
plain decoding is

    S(k) = (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)).

Estimates, per (run label, spec method), from the spans:
- alpha: maximum likelihood over the rounds (see `spec.AcceptanceStats`): accepted tokens over
  accepted tokens plus rounds that ended in a rejection.
- c: draft time per drafted token over verify time per round, i.e.
  (draft_s / draft_tokens) / (verify_s / rounds), summed over the group's generations. One verify
  pass scores k + 1 tokens in one target forward, which is the target pass of the model.
The formula assumes a verify pass costs one plain decode step and that every round drafts k
tokens; prompt lookup drafts nothing when it finds no match, so measured speedups can fall short
of S(k). `measured_speedup` is therefore reported beside it where the set holds plain generations.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

import numpy as np

from agenttrace.report.model import GenerationFigures, SpeedupPoint, WhatIf
from agenttrace.report.spec import AcceptanceStats

if TYPE_CHECKING:
    from agenttrace.report.figures import TaskAnalysis

K_RANGE = range(1, 11)


def tokens_per_round(alpha: float, k: int) -> float:
    """Expected tokens per target pass with k drafts: (1 - alpha^(k+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, c: float, k: int) -> float:
    """Leviathan et al.'s expected speedup of speculative over plain decoding."""
    return tokens_per_round(alpha, k) / (k * c + 1.0)


def speedup_curve(alpha: float, c: float, ks: range = K_RANGE) -> list[SpeedupPoint]:
    return [SpeedupPoint(k=k, speedup=expected_speedup(alpha, c, k), tokens_per_round=tokens_per_round(alpha, k)) for k in ks]


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def whatif_for(label: str | None, method: str, gens: list[GenerationFigures], stats: AcceptanceStats,
               plain_decode_s_per_token: float | None) -> WhatIf:
    """The what-if of one drafter from its generations and their pooled acceptance statistics."""
    alpha = stats.alpha
    draft_per_token = stats.draft_s / stats.draft_tokens if stats.draft_tokens else None
    verify_per_round = stats.verify_s / stats.rounds if stats.rounds and stats.verify_s > 0 else None
    c = draft_per_token / verify_per_round if draft_per_token is not None and verify_per_round else None
    ks = Counter(g.num_speculative_tokens for g in gens if g.num_speculative_tokens)
    actual_k = ks.most_common(1)[0][0] if ks else 0
    curve = speedup_curve(alpha, c) if alpha is not None and c is not None else []
    best = max(curve, key=lambda p: p.speedup) if curve else None  # max() keeps the first (smallest k) on ties
    at_actual = expected_speedup(alpha, c, actual_k) if curve and actual_k else None  # type: ignore[arg-type]
    spec_tpot = _median([g.decode_s_per_token for g in gens if g.decode_s_per_token])
    if plain_decode_s_per_token and spec_tpot:
        measured, basis = plain_decode_s_per_token / spec_tpot, "median decode time per token of plain generations in this set"
    elif verify_per_round and spec_tpot:
        measured, basis = verify_per_round / spec_tpot, "estimated: no plain generations here; one verify pass taken as one plain decode step"
    else:
        measured, basis = None, None
    rounds = sum(g.rounds for g in gens)
    accepted = sum(g.accepted_tokens for g in gens)
    return WhatIf(
        label=label,
        method=method,
        generations=len(gens),
        rounds=rounds,
        draft_tokens=sum(g.draft_tokens for g in gens),
        accepted_tokens=accepted,
        alpha=alpha,
        alpha_estimator=stats.estimator,
        c=c,
        draft_s_per_token=draft_per_token,
        verify_s_per_round=verify_per_round,
        actual_k=actual_k,
        curve=curve,
        best_k=best.k if best else None,
        best_speedup=best.speedup if best else None,
        speedup_at_actual_k=at_actual,
        best_over_actual=best.speedup / at_actual if best and at_actual else None,
        measured_mean_acceptance_length=1.0 + accepted / rounds if rounds else None,
        predicted_mean_acceptance_length=tokens_per_round(alpha, actual_k) if alpha is not None and actual_k else None,
        measured_speedup=measured,
        measured_speedup_basis=basis,
    )


def whatifs(analyses: list[TaskAnalysis]) -> list[WhatIf]:
    """One what-if per (run label, speculative method) present, in first-seen order."""
    gens: dict[tuple[str | None, str], list[GenerationFigures]] = defaultdict(list)
    stats: dict[tuple[str | None, str], AcceptanceStats] = {}
    plain: list[float] = []
    for a in analyses:
        label = a.figures.run_label
        for step in a.figures.steps:
            for g in step.generations:
                if g.method == "none":
                    if g.decode_s_per_token:
                        plain.append(g.decode_s_per_token)
                else:
                    gens[(label, g.method)].append(g)
        for method, st in a.acceptance:
            if method != "none":
                stats.setdefault((label, method), AcceptanceStats()).merge(st)
    plain_tpot = _median(plain)
    return [whatif_for(label, method, gs, stats.get((label, method), AcceptanceStats()), plain_tpot)
            for (label, method), gs in gens.items()]
