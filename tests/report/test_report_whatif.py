"""Speculation what-if: Leviathan et al.'s expected speedup from alpha and c estimated from spans."""

from __future__ import annotations

import pytest
from trace_builder import S, write_trace

from agenttrace.core.costmodel import expected_speedup, tokens_per_round
from agenttrace.report import report_from_files


def test_expected_speedup_formula():
    assert tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_speedup(0.8, 0.1, 4) == pytest.approx(3.3616 / 1.4)
    assert expected_speedup(1.0, 0.0, 3) == 4.0 and expected_speedup(0.0, 0.5, 2) == pytest.approx(0.5)


def _task(gen: S, label_task: str) -> S:
    attempt = S("attempt 1", "attempt", 0.0, 2.0, {"agenttrace.attempt.outcome": "ok"}, [gen])
    step = S("agent_step 1", "step", 0.0, 2.0, {"agenttrace.step.index": 1}, [attempt])
    return S("invoke_agent a", "agent", 0.0, 2.0, {"agenttrace.task.id": label_task}, [step])


def spec_gen(events=True, positions=None) -> S:
    attrs = {"agenttrace.spec.method": "prompt_lookup", "agenttrace.spec.num_speculative_tokens": 3,
             "agenttrace.spec.rounds": 4, "agenttrace.spec.draft_tokens": 11, "agenttrace.spec.accepted_tokens": 6,
             "agenttrace.spec.draft_s": 0.004, "agenttrace.spec.verify_s": 0.4, "agenttrace.spec.prefill_s": 0.5,
             "gen_ai.usage.output_tokens": 10}
    if positions:
        attrs["agenttrace.spec.acceptance_per_position"] = positions
    rounds = [(3, 3), (3, 1), (3, 0), (2, 2)]
    evs = [("speculate.round", 0.6 + 0.1 * i, {"drafted": d, "accepted": a, "draft_s": 0.001, "verify_s": 0.1})
           for i, (d, a) in enumerate(rounds)] if events else []
    return S("chat m", "generation", 0.0, 1.5, attrs, [], evs)


def test_alpha_is_the_maximum_likelihood_over_rounds_and_c_the_cost_ratio(tmp_path):
    plain = S("chat m", "generation", 0.0, 2.5, {"agenttrace.spec.method": "none", "agenttrace.spec.prefill_s": 0.5,
                                                 "gen_ai.usage.output_tokens": 10})
    write_trace(tmp_path / "spec.jsonl", _task(spec_gen(), "t"), resource={"agenttrace.run.label": "spec"})
    write_trace(tmp_path / "base.jsonl", _task(plain, "t"), resource={"agenttrace.run.label": "base"})
    (w,) = report_from_files([str(tmp_path)]).whatif
    assert (w.label, w.method, w.actual_k, w.alpha_estimator) == ("spec", "prompt_lookup", 3, "rounds")
    assert w.alpha == pytest.approx(6 / 8)  # 6 accepted, 2 rounds ended in a rejection
    # c: drafting (4 ms over 11 tokens) plus the verify line's slope (0: every pass took 0.1 s) over
    # the plain arm's step (2 s of decoding for 9 tokens after the prefill's)
    assert w.c == pytest.approx((0.004 / 11 + 0.0) / (2.0 / 9))
    assert [p.k for p in w.curve] == list(range(1, 11))
    # the cost model at k = 3 (tests/core/test_costmodel.py has the same rounds worked through): every
    # round drafted, a = (3+1.5)/6, (2+1.5)/5, (1+1.5)/3; h = 1, (4+1.75)/6, (3+1.75)/6; the loop's
    # time per round outside the timers (1.0 - 0.004 - 0.4) / 4 = 0.149 s
    assert w.overhead_s_per_round == pytest.approx(0.149) and w.no_draft_rounds == 0
    assert w.speedup_at_actual_k == pytest.approx(2.2979305, rel=1e-6) == w.predicted_speedup
    assert w.best_k == max(w.curve, key=lambda p: p.speedup).k and w.best_over_actual >= 1.0
    assert w.measured_mean_acceptance_length == pytest.approx(1 + 6 / 4)
    # plain: (2.5 - 0.5) / 10 s per token; speculative: (1.5 - 0.5) / 10
    assert w.measured_speedup == pytest.approx(2.0) and "plain generations" in w.measured_speedup_basis


def test_alpha_falls_back_to_positions_then_to_the_ratio(tmp_path):
    write_trace(tmp_path / "p.jsonl", _task(spec_gen(events=False, positions=[3, 2, 1]), "t"))
    (w,) = report_from_files([str(tmp_path / "p.jsonl")]).whatif
    assert w.alpha_estimator == "positions" and w.alpha == pytest.approx(6 / (6 + 4 - 1))
    write_trace(tmp_path / "r.jsonl", _task(spec_gen(events=False), "t"))
    (w,) = report_from_files([str(tmp_path / "r.jsonl")]).whatif
    assert w.alpha_estimator == "accepted/drafted" and w.alpha == pytest.approx(6 / 11)
    assert w.measured_speedup_source.startswith("estimated") and "no plain generation" in w.measured_speedup_basis


def test_tree_rounds_count_as_chains_of_their_depth(tmp_path):
    """A tree round drafts many nodes but keeps one path: the what-if (like the k controller)
    sees a chain of the tree's depth, so a path as deep as the tree is no rejection."""
    attrs = {"agenttrace.spec.method": "eagle", "agenttrace.spec.num_speculative_tokens": 3,
             "agenttrace.spec.rounds": 3, "agenttrace.spec.draft_tokens": 30, "agenttrace.spec.accepted_tokens": 5,
             "agenttrace.spec.draft_s": 0.003, "agenttrace.spec.verify_s": 0.3, "agenttrace.spec.prefill_s": 0.5,
             "agenttrace.spec.tree.depth": 3, "agenttrace.spec.tree.nodes": 10.0, "gen_ai.usage.output_tokens": 9}
    evs = [("speculate.round", 0.6 + 0.1 * i, {"drafted": 10, "accepted": a, "tree_depth": 3, "draft_s": 0.001,
                                               "verify_s": 0.1, "k": 3})
           for i, a in enumerate([3, 2, 0])]
    write_trace(tmp_path / "tree.jsonl", _task(S("chat m", "generation", 0.0, 1.5, attrs, [], evs), "t"))
    (w,) = report_from_files([str(tmp_path)]).whatif
    assert w.method == "eagle"
    assert w.alpha == pytest.approx(5 / 7)  # 5 accepted; the rounds keeping 2 and 0 of 3 depths are rejections
