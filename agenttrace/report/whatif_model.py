"""The speculation what-if's figures (report/whatif.py computes them): part of the report's JSON
schema (`Report.whatif`), kept in a module of their own."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SpeedupPoint(BaseModel):
    k: int
    speedup: float = Field(description="expected speedup over plain decoding at k (core/costmodel.py)")
    tokens_per_round: float = Field(description="expected tokens per verify pass at k (1 + accepted per round)")


class WhatIf(BaseModel):
    """Speculation what-if for one drafter (spec method) in one run label."""

    label: str | None
    method: str
    generations: int
    rounds: int
    constrained: bool = Field(False, description="the generations decoded under a grammar (drafts cut, masks)")
    draft_tokens: int
    accepted_tokens: int
    alpha: float | None = Field(description="estimated per-token acceptance probability")
    alpha_estimator: str = Field(description="how alpha was estimated (see whatif.py)")
    c: float | None = Field(description="the cost of one more drafted token (drafting it plus the verify pass's "
                                        "marginal cost by width) over one plain decode step")
    draft_s_per_token: float | None
    verify_s_per_round: float | None
    actual_k: int
    curve: list[SpeedupPoint]
    best_k: int | None
    best_speedup: float | None
    speedup_at_actual_k: float | None
    best_over_actual: float | None = Field(description="best_speedup / speedup_at_actual_k")
    measured_mean_acceptance_length: float | None
    predicted_mean_acceptance_length: float | None = Field(description="tokens_per_round at the actual k")
    measured_speedup: float | None = Field(
        None, description="decode time per token without speculation over with it: measured against plain "
                          "generations in this set, else estimated (measured_speedup_source)")
    measured_speedup_basis: str | None = None
    measured_speedup_source: str | None = Field(
        None, description="'plain arm' when measured against plain generations of the same model, else 'estimated: ...'")
    predicted_speedup: float | None = Field(
        None, description="the cost model's speedup for the run's own rounds (the k each asked for): compare measured")
    plain_step_s: float | None = Field(None, description="one plain decode step, the unit of every cost")
    plain_step_source: str | None = Field(None, description="'plain arm', or 'estimated: ...'")
    verify_s_fixed: float | None = Field(None, description="verify seconds ≈ verify_s_fixed + verify_s_per_token·width")
    verify_s_per_token: float | None = None
    verify_cost_source: str | None = Field(None, description="how the verify line was fitted (widths, or estimated)")
    overhead_s_per_round: float | None = Field(
        None, description="decode time per drafting round outside the draft and verify timers")
    no_draft_rounds: int = Field(0, description="rounds whose drafter proposed nothing (a plain step each), inferred "
                                                "from the output tokens the rounds do not account for")
    acceptance_by_position: list[float] = Field(
        default_factory=list, description="P(draft token i accepted | proposed, tokens before it accepted)")

    @property
    def measured_is_estimate(self) -> bool:
        """True when `measured_speedup` is an estimate (no plain arm): renderings mark it."""
        return self.measured_speedup_source is not None and self.measured_speedup_source != "plain arm"
