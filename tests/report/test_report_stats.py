"""Percentiles with counts, and the seeded bootstrap ratio of medians (shared with the benchmarks)."""

from __future__ import annotations

import numpy as np
import pytest

from agenttrace.report.stats import (
    bootstrap_paired_ratio,
    bootstrap_ratio_of_medians,
    distribution,
    from_order_statistics,
    order_statistics,
)


def test_distribution_reports_p99_only_from_100_samples():
    d = distribution([1.0, 2.0, 3.0, None, 4.0])
    assert (d.count, d.p50, d.min, d.max, d.mean, d.p99) == (4, 2.5, 1.0, 4.0, 2.5, None)
    assert distribution(range(100)).p99 == pytest.approx(98.01)
    assert distribution([]).count == 0 and distribution([]).p50 is None


def test_percentiles_from_two_order_statistics_are_numpys_bit_for_bit():
    # what a query engine sends back (the two values each percentile lies between) gives numpy's
    # percentiles exactly, on sizes from 1 to 300 and values of every scale; the mean is the sum
    # in the values' order (one addition after another), as a fold and an engine's running sum add
    rng = np.random.default_rng(7)
    for trial in range(600):
        n = int(rng.integers(1, 300))
        xs = (rng.exponential(size=n) * 10.0 ** int(rng.integers(-6, 6)) if trial % 3 == 0 else
              rng.integers(0, 4, size=n).astype(float) if trial % 3 == 1 else rng.normal(size=n))
        d = distribution(xs)
        p50, p95, p99 = np.percentile(xs, [50, 95, 99])
        assert (d.p50, d.p95) == (p50, p95) and d.p99 == (p99 if n >= 100 else None)
        total = 0.0
        for x in xs:
            total += float(x)
        assert d.mean == total / n and (d.min, d.max) == (xs.min(), xs.max())
        ordered = np.sort(xs)
        picked = [(float(ordered[lo]), float(ordered[hi])) for lo, hi, _ in order_statistics(n)]
        assert from_order_statistics(n, total, float(ordered[0]), float(ordered[-1]), picked) == d


def test_bootstrap_is_deterministic_and_tells_gain_from_noise():
    rng = np.random.default_rng(1)
    a = rng.normal(1.0, 0.05, 60)
    faster = a * 0.7
    same = rng.normal(1.0, 0.05, 60)
    r1 = bootstrap_ratio_of_medians(a, faster, seed=3, resamples=2000)
    r2 = bootstrap_ratio_of_medians(a, faster, seed=3, resamples=2000)
    assert r1 == r2
    assert r1.ratio == pytest.approx(0.7) and r1.low < 0.7 < r1.high < 1.0 and r1.verdict == "gain"
    assert bootstrap_ratio_of_medians(faster, a, resamples=2000).verdict == "regression"
    noise = bootstrap_ratio_of_medians(a, same, resamples=2000)
    assert noise.low <= 1.0 <= noise.high and noise.verdict == "noise"
    # for throughputs higher is better: the same ratio is a regression
    assert bootstrap_ratio_of_medians(a, faster, higher_is_better=True, resamples=2000).verdict == "regression"


def test_bootstrap_without_a_ratio_is_not_applicable():
    assert bootstrap_ratio_of_medians([], [1.0]).verdict == "n/a"
    est = bootstrap_ratio_of_medians([0.0, 0.0, 1.0], [1.0, 2.0])
    assert est.verdict == "n/a" and est.ratio is None and est.median_b == 1.5


def test_bootstrap_handles_large_samples_in_blocks():
    a = np.linspace(1.0, 2.0, 200_001)
    est = bootstrap_ratio_of_medians(a, a * 1.01, resamples=50)
    assert est.ratio == pytest.approx(1.01) and est.verdict == "regression"


def test_pairing_finds_a_steady_gain_that_task_to_task_spread_hides_unpaired():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.5, 15.0, size=12)  # a dozen tasks of very different lengths
    arm = base * rng.normal(0.85, 0.02, size=12)  # every task 15% faster, give or take 2%
    unpaired = bootstrap_ratio_of_medians(base, arm)
    paired = bootstrap_paired_ratio(zip(base, arm))
    assert unpaired.verdict == "noise"
    assert paired.paired and paired.verdict == "gain" and paired.n_a == 12
    assert 0.8 < paired.low < paired.ratio < paired.high < 0.9
    assert bootstrap_paired_ratio(zip(base, arm)) == paired  # seeded
    same = bootstrap_paired_ratio(zip(base, base * rng.normal(1.0, 0.02, size=12)))
    assert same.verdict == "noise"
    assert bootstrap_paired_ratio([(0.0, 1.0)]).verdict == "n/a"  # a zero baseline has no ratio
