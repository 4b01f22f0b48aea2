"""Choosing k and falling back: the expected-speedup model and its estimates."""

from __future__ import annotations

import pytest

from agenttrace.generation.adaptive import KController, best_k, expected_speedup


def test_expected_speedup_matches_leviathan():
    # alpha = 0.8, c = 0.1, k = 4: (1 - 0.8^5) / (0.2 * 1.4)
    assert expected_speedup(0.8, 0.1, 4) == pytest.approx((1 - 0.8**5) / (0.2 * 1.4))
    assert expected_speedup(0.5, 0.0, 1) == pytest.approx(1.5)
    assert expected_speedup(0.9, 0.2, 0) == 1.0
    assert expected_speedup(1.0, 0.0, 3) == pytest.approx(4.0, rel=1e-4)  # every token accepted


def test_best_k_grows_with_acceptance_and_shrinks_with_cost():
    assert best_k(0.9, 0.05, 10)[0] > best_k(0.6, 0.05, 10)[0] >= best_k(0.3, 0.05, 10)[0]
    assert best_k(0.8, 0.3, 10)[0] < best_k(0.8, 0.02, 10)[0]
    k, s = best_k(0.05, 0.5, 10)
    assert k == 1 and s < 1.0


def feed(ctrl: KController, alpha_pattern, k: int, verify_s=lambda n: 0.05 + 0.01 * n, draft_s=0.0):
    for accepted in alpha_pattern:
        ctrl.record_round(k, accepted, draft_s * k, verify_s(k + 1))


def test_acceptance_is_estimated_as_a_geometric_run():
    ctrl = KController(4, decay=1.0, prior_alpha=0.5)
    # accepted counts of a process with alpha = 0.75 per token, truncated at k = 4
    feed(ctrl, [4, 3, 1, 4, 2, 4, 0, 4, 3, 4] * 20, k=4)
    successes = sum([4, 3, 1, 4, 2, 4, 0, 4, 3, 4]) * 20
    failures = sum(a < 4 for a in [4, 3, 1, 4, 2, 4, 0, 4, 3, 4]) * 20
    assert ctrl.alpha == pytest.approx((successes + 1) / (successes + failures + 2))


def test_verify_cost_line_and_cost_ratio_from_several_widths():
    ctrl = KController(8, decay=1.0)
    for n in (2, 3, 5, 9):
        ctrl.record_round(n - 1, 0, 0.0, 0.04 + 0.005 * n)
    a, b = ctrl.verify_line()
    assert (a, b) == (pytest.approx(0.04), pytest.approx(0.005))
    assert ctrl.cost_ratio == pytest.approx(0.005 / 0.045)


def test_adaptive_k_follows_the_measurements():
    high = KController(8)
    feed(high, [8] * 30, k=8, verify_s=lambda n: 0.05 + 0.002 * n)
    low = KController(8)
    feed(low, [0, 1, 0, 0] * 10, k=8, verify_s=lambda n: 0.05 + 0.01 * n)
    assert high.next_k() == 8
    assert low.next_k() <= 2
    assert KController(8, adaptive=False).next_k() == 8


def test_fallback_when_speculation_does_not_pay_and_only_after_warmup():
    ctrl = KController(4, warmup_rounds=6)
    ctrl.start_generation()
    feed(ctrl, [0] * 5, k=4, verify_s=lambda n: 0.05 + 0.02 * n, draft_s=0.02)
    assert ctrl.fallback_reason() is None  # still warming up
    feed(ctrl, [0] * 3, k=4, verify_s=lambda n: 0.05 + 0.02 * n, draft_s=0.02)
    reason = ctrl.fallback_reason()
    assert reason is not None and reason.startswith("not_paying: acceptance")
    good = KController(4)
    good.start_generation()
    feed(good, [4, 3, 4, 4, 2, 4, 4, 4], k=4)
    assert good.fallback_reason() is None


def test_a_fallback_carries_over_to_the_next_generations_then_speculation_is_probed_again():
    ctrl = KController(4, warmup_rounds=6, probe_every=3)
    assert ctrl.start_generation() is None
    feed(ctrl, [0] * 6, k=4, verify_s=lambda n: 0.05 + 0.02 * n, draft_s=0.02)
    first = ctrl.fallback_reason()
    assert first is not None
    skipped = [ctrl.start_generation() for _ in range(2)]
    assert all(r is not None and r.startswith(first) and "earlier generation" in r for r in skipped)
    assert ctrl.start_generation() is None  # the probe: speculates and measures again
    assert ctrl.fallback_reason() is None  # warming up afresh



def test_after_explore_every_rounds_below_k_max_one_round_asks_for_k_max():
    ctrl = KController(8, explore_every=4)
    # acceptance low and wide passes costly: the model's k is small
    for accepted in [0, 1, 0, 0]:
        ctrl.record_round(1, accepted, 0.0, 0.05 + 0.02 * 2, 1)
    ctrl.record_round(2, 0, 0.0, 0.05 + 0.02 * 3, 2)
    ctrl.stats.add_pass(1, 0.07)
    assert ctrl.model().best_k(8)[0] <= 2
    assert ctrl.next_k() == 8  # five rounds below k_max: the probe
    ctrl.record_round(8, 0, 0.0, 0.05 + 0.02 * 9, 8)
    assert ctrl.next_k() <= 2  # back to the model's choice, with the wide pass timed afresh


def test_every_round_ages_the_timings_of_every_width():
    ctrl = KController(8, decay=0.5)
    ctrl.record_round(8, 8, 0.0, 0.9, 8)  # width 9
    for _ in range(3):
        ctrl.record_round(1, 1, 0.0, 0.1, 1)  # width 2
    (w9, _), (w2, _) = ctrl.stats.widths[9], ctrl.stats.widths[2]
    assert w9 == pytest.approx(0.125) and w2 == pytest.approx(1 + 0.5 + 0.25)
