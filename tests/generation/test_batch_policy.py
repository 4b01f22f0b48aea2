"""The load-aware k policy (generation/batching/policy.py): drafts that pay at batch 1, none under
load, fewer for a costly drafter."""

from __future__ import annotations

from agenttrace.core.costmodel import CostModel, VerifyLine
from agenttrace.generation.batching.policy import PassCost, allocate_batch_k


def _model(alpha: float, draft_s: float = 0.0):
    return CostModel(alpha=alpha, acceptance=(), continuation=(), continuation_tail=1.0, draft_s_per_token=draft_s,
                     verify=VerifyLine(0.04, 0.001, 2), plain_step_s=0.041)


def test_at_batch_one_a_memory_bound_pass_takes_every_draft_that_pays():
    line = VerifyLine(0.040, 0.001, 3)  # a pass reads the weights: 40 ms, and 1 ms per row
    [choice] = allocate_batch_k([(_model(0.8), 6)], 1, line, 1)
    assert choice.k == 6 and "pays" in choice.reason


def test_under_load_the_policy_drafts_less_down_to_none():
    """The paradox: a batch of 32 already returns ~1/b tokens per second of rows, so a draft
    token worth 0.5 of a token no longer pays; a sure one (alpha 0.99) still does."""
    line = VerifyLine(0.040, 0.004, 3)  # compute-bound rows: 4 ms each
    choices = allocate_batch_k([(_model(0.5), 4)] * 31 + [(None, 0)], 32, line, 32)
    assert all(c.k == 0 for c in choices)
    assert "below the pass's" in choices[0].reason and choices[-1].reason == ""
    sure = allocate_batch_k([(_model(0.99), 4)] + [(_model(0.5), 4)] * 31, 32, line, 32)
    assert sure[0].k > 0 and all(c.k == 0 for c in sure[1:])
    light = allocate_batch_k([(_model(0.5), 4)] * 2, 2, line, 2)
    assert all(c.k > 0 for c in light)  # at batch 2 the same drafts still pay


def test_a_costly_drafter_gets_fewer_tokens_than_a_free_one_at_the_same_acceptance():
    line = VerifyLine(0.040, 0.002, 3)
    free, costly = allocate_batch_k([(_model(0.7), 8), (_model(0.7, draft_s=0.02), 8)], 2, line, 2)
    assert free.k > costly.k


def test_the_pass_cost_follows_recent_passes():
    cost = PassCost(decay=0.5)
    assert cost.line().widths == 0  # nothing measured: the prior's shape
    for _ in range(10):
        cost.add(1, 0.040)
        cost.add(9, 0.080)
    line = cost.line()
    assert abs(line.per_token_s - 0.005) < 1e-9 and abs(line.at(1) - 0.040) < 1e-9
    for _ in range(10):
        cost.add(9, 0.160)  # a slow spell: the recent passes decide
    assert cost.line().at(9) > 0.15
