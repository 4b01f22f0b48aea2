"""Statistics the reports and the benchmark harness share: percentiles with counts, and the seeded
bootstrap interval of a ratio of medians that decides "gain", "regression" or "noise".

Plain functions over numpy arrays; the results are small typed records.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agenttrace.report.model import Distribution

Verdict = Literal["gain", "regression", "noise", "n/a"]

# Resamples are drawn in blocks of at most this many values, so a comparison of 1M steps does not
# materialise a resamples x n index matrix.
_BLOCK_VALUES = 4_000_000


PERCENTILES = (0.5, 0.95, 0.99)


def lerp(low: float, high: float, t: float) -> float:
    """The value a fraction `t` of the way from `low` to `high`, computed as numpy's percentile
    computes it (from the nearer end), so its bits are numpy's."""
    if t >= 0.5:
        return high - (high - low) * (1 - t)
    return low + (high - low) * t


def order_statistics(n: int) -> list[tuple[int, int, float]]:
    """For each of PERCENTILES over n sorted values: the two 0-based positions it lies between and
    how far between (linear interpolation between order statistics, numpy's default). A query
    engine picks the same two values (columnar/summary.py)."""
    out = []
    for q in PERCENTILES:
        h = (n - 1) * q
        lo = math.floor(h)
        out.append((lo, min(lo + 1, n - 1), h - lo))
    return out


def from_order_statistics(count: int, total: float, low: float, high: float,
                          picked: list[tuple[float, float]]) -> Distribution:
    """A Distribution from the count, the values' sum in their order, the extremes and, per
    percentile, the two values of `order_statistics(count)`: what `distribution` computes from
    the values themselves, and what an engine that holds them sends back instead."""
    if count == 0:
        return Distribution(count=0)
    (p50, p95, p99) = (lerp(a, b, t) for (a, b), (_, _, t) in zip(picked, order_statistics(count), strict=True))
    return Distribution(count=count, p50=p50, p95=p95, p99=p99 if count >= 100 else None, mean=total / count,
                        min=low, max=high)


def distribution(values: Iterable[float | None] | np.ndarray) -> Distribution:
    """p50 and p95 (linear interpolation between order statistics, numpy's default), p99 only
    with 100 samples or more (SPANS.md), with the count, mean, min and max; None values skipped.
    The mean is the values' sum in their order (one addition after another, as a fold adds them)
    over the count: the same bits in every engine that adds them in that order."""
    if isinstance(values, np.ndarray):  # a column already gathered (no None in it)
        xs = values
    else:
        xs = np.fromiter((v for v in values if v is not None), dtype=float)
    if xs.size == 0:
        return Distribution(count=0)
    ordered = np.sort(xs)
    picked = [(float(ordered[lo]), float(ordered[hi])) for lo, hi, _ in order_statistics(int(xs.size))]
    total = float(np.cumsum(xs)[-1])  # in order: numpy's sum() adds pairwise
    return from_order_statistics(int(xs.size), total, float(ordered[0]), float(ordered[-1]), picked)


class Sampler:
    """The values of one distribution, added one at a time: all of them, or with `limit` a uniform
    sample of at most `limit` (reservoir sampling, seeded), the count, mean and extremes kept
    exact over all of them (a summary of an input too large to hold). With `width` each value is
    a row of that many columns (a table: one distribution per column). None values are skipped."""

    __slots__ = ("_buf", "_high", "_low", "_rand", "_sum", "_values", "count", "limit", "width")

    def __init__(self, limit: int | None = None, *, width: int | None = None, seed: int = 0) -> None:
        self.limit = limit
        self.width = width
        self.count = 0
        self._values: list = []  # every value (no limit)
        self._buf = None if limit is None else np.empty((limit, width or 1))  # the reservoir
        self._rand = None if limit is None else random.Random(seed)
        self._sum = self._low = self._high = None  # over every value, when sampling

    def add(self, value) -> None:
        if value is None:
            return
        self.count += 1
        if self.limit is None:
            self._values.append(value)
            return
        if self.width is None:  # a scalar: Python arithmetic, cheaper than numpy for one value
            if self._sum is None:
                self._sum = self._low = self._high = value
            else:
                self._sum += value
                self._low = min(self._low, value)
                self._high = max(self._high, value)
        else:
            row = np.asarray(value, dtype=float)
            if self._sum is None:
                self._sum, self._low, self._high = row.copy(), row.copy(), row.copy()
            else:
                self._sum += row
                np.minimum(self._low, row, out=self._low)
                np.maximum(self._high, row, out=self._high)
        if self.count <= self.limit:
            self._buf[self.count - 1] = value
        else:
            j = int(self._rand.random() * self.count)
            if j < self.limit:
                self._buf[j] = value

    @property
    def sampled(self) -> bool:
        return self.limit is not None and self.count > self.limit

    def _table(self) -> np.ndarray:
        if self.limit is None:
            return np.array(self._values, dtype=float).reshape(len(self._values), self.width or 1)
        return self._buf[: min(self.count, self.limit)]

    def _summary(self, d: Distribution, column: int) -> Distribution:
        if not self.sampled or d.count == 0:
            return d
        pick = (lambda a: float(a)) if self.width is None else (lambda a: float(a[column]))
        return d.model_copy(update={"count": self.count, "mean": pick(self._sum) / self.count, "min": pick(self._low),
                                    "max": pick(self._high), "sample": self.limit})

    def distribution(self) -> Distribution:
        """The distribution of scalar values."""
        if self.limit is None:
            return distribution(self._values)
        return self._summary(distribution(self._table()[:, 0]), 0)

    def distributions(self) -> list[Distribution]:
        """The distribution of each column of rows (the table gathered once)."""
        table = self._table()
        return [self._summary(distribution(table[:, i]), i) for i in range(self.width or 1)]


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """median(b) / median(a) with its bootstrap interval, and what it means.

    `verdict` is "noise" when the interval contains 1.0; otherwise "gain" when b is better than a
    (lower, or higher when `higher_is_better`), else "regression"; "n/a" when there is no ratio
    (an empty side, or a zero median in a)."""

    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    verdict: Verdict
    paired: bool = False  # True: `ratio` is the median of per-pair ratios (bootstrap_paired_ratio)


def _medians_of_resamples(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    out = np.empty(resamples)
    block = max(1, _BLOCK_VALUES // max(1, x.size))
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        out[start:stop] = np.median(x[idx], axis=1)
    return out


def bootstrap_ratio_of_medians(
    a: Iterable[float],
    b: Iterable[float],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    higher_is_better: bool = False,
) -> RatioEstimate:
    """The ratio of medians median(b) / median(a) with a percentile-bootstrap interval.

    Each side is resampled with replacement independently (the samples need not be paired),
    `resamples` times, from `numpy.random.default_rng(seed)`: the same inputs and seed always give
    the same interval. Resampled ratios with a zero denominator are dropped. Deterministic, no
    global random state touched.
    """
    xa = np.asarray(list(a), dtype=float)
    xb = np.asarray(list(b), dtype=float)
    med_a = float(np.median(xa)) if xa.size else None
    med_b = float(np.median(xb)) if xb.size else None
    if not xa.size or not xb.size or not med_a:
        return RatioEstimate(int(xa.size), int(xb.size), med_a, med_b, None, None, None, confidence, "n/a")
    rng = np.random.default_rng(seed)
    ma = _medians_of_resamples(xa, rng, resamples)
    mb = _medians_of_resamples(xb, rng, resamples)
    ok = ma != 0
    ratios = mb[ok] / ma[ok]
    tail = (1.0 - confidence) / 2 * 100
    low, high = (float(v) for v in np.percentile(ratios, [tail, 100 - tail]))
    ratio = med_b / med_a  # type: ignore[operator]
    verdict = _verdict(low, high, higher_is_better)
    return RatioEstimate(int(xa.size), int(xb.size), med_a, med_b, ratio, low, high, confidence, verdict)


def _verdict(low: float, high: float, higher_is_better: bool) -> Verdict:
    if low <= 1.0 <= high:
        return "noise"
    better = high < 1.0 if not higher_is_better else low > 1.0
    return "gain" if better else "regression"


def bootstrap_paired_ratio(
    pairs: Iterable[tuple[float, float]],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    higher_is_better: bool = False,
) -> RatioEstimate:
    """The median of per-pair ratios b_i / a_i with a percentile-bootstrap interval over pairs.

    For designs that measure both sides on the same unit of work (the harness runs every arm on
    the same task, interleaved): the task-to-task spread, which dominates an unpaired comparison
    of a dozen heterogeneous tasks, cancels in each ratio. Pairs with a zero `a` are dropped.
    `median_a` / `median_b` are the plain medians of each side, for display."""
    kept = [(a, b) for a, b in pairs if a]
    xa = np.asarray([a for a, _ in kept], dtype=float)
    xb = np.asarray([b for _, b in kept], dtype=float)
    n = int(xa.size)
    if not n:
        return RatioEstimate(0, 0, None, None, None, None, None, confidence, "n/a", paired=True)
    r = xb / xa
    rng = np.random.default_rng(seed)
    meds = _medians_of_resamples(r, rng, resamples)
    tail = (1.0 - confidence) / 2 * 100
    low, high = (float(v) for v in np.percentile(meds, [tail, 100 - tail]))
    return RatioEstimate(n, n, float(np.median(xa)), float(np.median(xb)), float(np.median(r)), low, high,
                         confidence, _verdict(low, high, higher_is_better), paired=True)
