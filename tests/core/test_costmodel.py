"""The speculation cost model: exact figures on hand-made rounds, its reduction to Leviathan et
al.'s formula, and the controller and the what-if agreeing on the same rounds."""

from __future__ import annotations

import pytest
from trace_builder import S, write_trace

from agenttrace.core.costmodel import (
    CostModel,
    RoundStats,
    VerifyLine,
    best_k_at_widths,
    expected_speedup,
    fit,
    fit_verify_line,
    tokens_per_round,
)
from agenttrace.generation.adaptive import KController
from agenttrace.report import report_from_files
from agenttrace.report.whatif import split_untimed

# (drafted, accepted, k asked for): verify takes 0.2 + 0.02 n s for n = drafted + 1, drafting 1 ms a token
ROUNDS = [(3, 3, 3), (3, 1, 3), (2, 2, 3), (3, 0, 3)]
NO_DRAFT = 2
PLAIN_S = 0.1


def verify_s(drafted: int) -> float:
    return 0.2 + 0.02 * (drafted + 1)


def synthetic() -> RoundStats:
    stats = RoundStats()
    for d, a, k in ROUNDS:
        stats.add_round(d, a, 0.001 * d, verify_s(d), k)
    for _ in range(NO_DRAFT):
        stats.add_no_draft(3)
    return stats


def test_the_scalar_form_is_leviathan():
    assert tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert tokens_per_round(1.0, 3) == 4.0 and tokens_per_round(0.5, 0) == 1.0
    assert expected_speedup(0.8, 0.1, 4) == pytest.approx(3.3616 / 1.4)
    # all ones, no overhead, the plain step on the verify line: the model is the formula, c = (D + b) / (a + b)
    model = CostModel(alpha=0.8, acceptance=(), continuation=(), continuation_tail=1.0, draft_s_per_token=0.002,
                      verify=VerifyLine(0.04, 0.006, 2), plain_step_s=0.046)
    assert model.c == pytest.approx(0.008 / 0.046)
    for k in range(1, 11):
        assert model.speedup(k) == pytest.approx(expected_speedup(0.8, model.c, k))
    assert model.speedup(0) == 1.0


def test_per_position_estimates_on_hand_made_rounds():
    stats = synthetic()
    # offered: position 1 to all 6 rounds, 2 and 3 to the 4 that drafted; proposed 4, 4, 3
    assert (stats.offered, stats.proposed) == ([6, 4, 4], [4, 4, 3])
    # judged: position 1 in 4 rounds, 2 after an acceptance in 3, 3 in 1; accepted 3, 2, 1
    assert (stats.judged, stats.passed) == ([4, 3, 1], [3, 2, 1])
    assert stats.alpha == 6 / 8 and stats.no_draft == 2
    model = fit(stats, plain_step_s=PLAIN_S)
    assert model.alpha == 0.75
    # a_i shrunk by 2 pseudo-rounds towards alpha; h_1 towards 1; later h_i towards the pooled 7/8
    assert model.acceptance == pytest.approx(((3 + 1.5) / 6, (2 + 1.5) / 5, (1 + 1.5) / 3))
    assert model.continuation == pytest.approx(((4 + 2) / (6 + 2), (4 + 1.75) / 6, (3 + 1.75) / 6))
    assert (model.verify.fixed_s, model.verify.per_token_s, model.verify.widths) == (
        pytest.approx(0.2), pytest.approx(0.02), 2)
    assert model.draft_s_per_token == pytest.approx(0.001)
    h, a = model.continuation, model.acceptance
    p1 = h[0] * a[0]
    p2 = p1 * h[1] * a[1]
    p3 = p2 * h[2] * a[2]
    assert model.tokens_per_round(3) == pytest.approx(1 + p1 + p2 + p3)
    drafted = h[0] + h[0] * h[1] + h[0] * h[1] * h[2]
    seconds = (1 - h[0]) * PLAIN_S + h[0] * (0.2 + 0.02) + (0.001 + 0.02) * drafted
    assert model.round_s(3) == pytest.approx(seconds)
    assert model.speedup(3) == pytest.approx((1 + p1 + p2 + p3) * PLAIN_S / seconds)
    assert model.speedup(3) == pytest.approx(0.94023, abs=1e-5)
    assert model.tokens_per_verify(3) == pytest.approx(1 + (p1 + p2 + p3) / h[0])
    assert model.speedup_mix({3: 6.0}) == pytest.approx(model.speedup(3))


def test_the_plain_step_comes_from_outside_then_from_timed_steps_then_from_the_line():
    stats = synthetic()
    assert fit(stats).plain_step_s == pytest.approx(0.22)  # the verify line at n = 1
    stats.add_pass(1, 0.15)
    assert fit(stats).plain_step_s == pytest.approx(0.15)
    assert fit(stats, plain_step_s=0.1).plain_step_s == 0.1
    # the line is fitted on verify passes only: the one-token pass does not tilt it
    assert stats.verify_line().per_token_s == pytest.approx(0.02)


def test_verify_line_fit_and_its_prior():
    assert fit_verify_line([]) is None
    line = fit_verify_line([(2, 3.0, 3 * 0.05), (5, 1.0, 0.08)])
    assert (line.fixed_s, line.per_token_s) == (pytest.approx(0.03), pytest.approx(0.01))
    one = fit_verify_line([(4, 10.0, 10 * 0.13)])  # one width: slope 0.1 of the one-token pass
    assert one.widths == 1 and one.at(1) == pytest.approx(0.1) and one.per_token_s == pytest.approx(0.01)
    assert "estimated" in one.source and "fitted over 2 widths" == line.source
    flat = fit_verify_line([(2, 1.0, 0.2), (4, 1.0, 0.1)])  # noise: wider looked cheaper
    assert flat.per_token_s == 0.0 and flat.fixed_s == pytest.approx(0.15)


def test_nothing_timed_measures_in_plain_steps_with_the_prior():
    model = fit(RoundStats())
    assert model.alpha == 0.5 and model.plain_step_s == pytest.approx(1.0) and model.c == pytest.approx(0.1)


def test_decay_weighs_recent_rounds_more():
    stats = RoundStats(decay=0.5)
    stats.add_round(4, 4, 0.0, 0.1, 4)
    stats.add_round(4, 0, 0.0, 0.1, 4)
    assert stats.accepted == pytest.approx(2.0) and stats.rejections == pytest.approx(1.0)
    assert stats.alpha == pytest.approx(2 / 3)


def test_untimed_decode_time_splits_between_no_draft_steps_and_rounds():
    # step 0.05 s, 0.01 s of loop per round
    gens = [(10, 5, 10 * 0.05 + 5 * 0.01), (2, 20, 2 * 0.05 + 20 * 0.01), (6, 6, 6 * 0.06)]
    step, loop = split_untimed(gens)
    assert step == pytest.approx(0.05) and loop == pytest.approx(0.01)
    assert split_untimed(gens[:1]) is None  # one generation cannot tell them apart
    assert split_untimed([(1, 2, 0.1), (2, 4, 0.2)]) is None  # nor proportions alike


def test_the_bench_bound_uses_each_width_at_its_measured_cost():
    times = {1: 0.010, 2: 0.011, 4: 0.014, 8: 0.030}
    k, speedup = best_k_at_widths(0.9, times, 0.010)
    assert k == 3 and speedup == pytest.approx(tokens_per_round(0.9, 3) / 1.4)


def _trace_gen(rounds, no_draft: int, plain_s: float) -> S:
    """A speculative generation whose decode time is its rounds plus its no-draft plain steps."""
    t = 0.5  # prefill 0.5 s
    events = []
    for d, a, k in rounds:
        t += 0.001 * d + verify_s(d)
        events.append(("speculate.round", t, {"drafted": d, "accepted": a, "draft_s": 0.001 * d,
                                              "verify_s": verify_s(d), "k": k}))
    t += no_draft * plain_s
    out = 1 + sum(1 + a for _, a, _ in rounds) + no_draft
    attrs = {"agenttrace.spec.method": "prompt_lookup", "agenttrace.spec.num_speculative_tokens": 6,
             "agenttrace.spec.rounds": len(rounds), "agenttrace.spec.draft_tokens": sum(d for d, _, _ in rounds),
             "agenttrace.spec.accepted_tokens": sum(a for _, a, _ in rounds),
             "agenttrace.spec.draft_s": sum(0.001 * d for d, _, _ in rounds),
             "agenttrace.spec.verify_s": sum(verify_s(d) for d, _, _ in rounds),
             "agenttrace.spec.prefill_s": 0.5, "gen_ai.usage.output_tokens": out, "gen_ai.request.model": "m"}
    return S("chat m", "generation", 0.0, t, attrs, [], events)


def _task(gen: S, task: str) -> S:
    step = S("agent_step 1", "step", 0.0, gen.end, {"agenttrace.step.index": 1}, [gen])
    return S("invoke_agent a", "agent", 0.0, gen.end, {"agenttrace.task.id": task}, [step])


def test_the_controller_and_the_whatif_give_the_same_prediction_for_the_same_rounds(tmp_path):
    rounds = [(6, 6, 6), (4, 4, 6), (6, 2, 6), (3, 1, 3), (3, 3, 3), (6, 5, 6), (1, 0, 1), (6, 0, 6), (4, 4, 6)]
    no_draft = 3
    # the plain arm: 21 tokens, 20 steps of PLAIN_S after the prefill
    plain = S("chat m", "generation", 0.0, 0.5 + 20 * PLAIN_S, {"agenttrace.spec.method": "none", "gen_ai.request.model": "m",
                                                              "agenttrace.spec.prefill_s": 0.5, "gen_ai.usage.output_tokens": 21})
    write_trace(tmp_path / "spec.jsonl", _task(_trace_gen(rounds, no_draft, PLAIN_S), "t"), resource={"agenttrace.run.label": "spec"})
    write_trace(tmp_path / "base.jsonl", _task(plain, "t"), resource={"agenttrace.run.label": "base"})
    (w,) = report_from_files([str(tmp_path)]).whatif

    ctrl = KController(6, decay=1.0, prior_rounds=0)
    for d, a, k in rounds:
        ctrl.record_round(d, a, 0.001 * d, verify_s(d), k)
    for _ in range(no_draft):
        ctrl.record_no_draft(6, PLAIN_S)
    model = ctrl.model()

    assert w.no_draft_rounds == no_draft and w.plain_step_s == pytest.approx(PLAIN_S)
    assert w.overhead_s_per_round == pytest.approx(0.0, abs=1e-9) and w.measured_speedup_source == "plain arm"
    assert w.alpha == pytest.approx(model.alpha) and w.c == pytest.approx(model.c)
    assert w.acceptance_by_position == pytest.approx(list(model.acceptance))
    assert [p.speedup for p in w.curve] == pytest.approx([model.speedup(k) for k in range(1, 11)])
    assert w.speedup_at_actual_k == pytest.approx(model.speedup(6))
    assert w.best_k == model.best_k(10)[0]
    # the controller's k is the what-if's best within its k_max
    assert ctrl.next_k() == max(range(1, 7), key=lambda k: w.curve[k - 1].speedup)
    # the run's own rounds asked for 6 (6 of them), 3 (2) and 1 (1); the no-draft rounds count under 6
    assert ctrl.stats.asked == {6: 6 + no_draft, 3: 2, 1: 1}
    assert w.predicted_speedup == pytest.approx(model.speedup_mix(ctrl.stats.asked))


def test_a_model_fitted_on_no_draft_rounds_alone_is_defined():
    # a server's first requests: prompt lookup found nothing yet, so only position 1 was offered
    stats = RoundStats()
    stats.add_no_draft(4, 0.1)
    stats.add_no_draft(4, 0.1)
    model = fit(stats)
    k, speedup = model.best_k(4)
    assert 1 <= k <= 4 and speedup > 0
