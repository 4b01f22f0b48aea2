"""How many tokens to draft, and when to stop speculating.

The expected speedup of a round that drafts k tokens (Leviathan et al. 2023) is

    S(k) = (1 - α^(k+1)) / ((1 - α) (k·c + 1))

with α the probability that a draft token is accepted and c the cost of one more drafted token
relative to one plain decoding step. Here c counts the draft model's time per token *and* the
extra cost of verifying one more token: on a CPU a forward over n tokens is far from free in n
(measured on the bundled model: n=4 costs 1.55x and n=8 1.88x of n=1), so a c that only counted
drafting would push k to its maximum for a free drafter like prompt lookup.

Both are estimated from the rounds themselves, as exponentially weighted sums so they follow
the workload: α by the maximum-likelihood estimate for a geometric run (accepted tokens over
accepted tokens plus rejections), the verify cost as a line a + b·n fitted to verify passes of
different widths, the plain step cost from plain steps (or a, b when there are none).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KController", "expected_speedup", "best_k"]


def expected_speedup(alpha: float, c: float, k: int) -> float:
    """S(k): expected tokens per unit of plain-decoding time, relative to plain decoding."""
    if k <= 0:
        return 1.0
    alpha = min(max(alpha, 0.0), 0.999999)
    return (1.0 - alpha ** (k + 1)) / ((1.0 - alpha) * (k * c + 1.0))


def best_k(alpha: float, c: float, k_max: int) -> tuple[int, float]:
    """The k in 1..k_max with the highest expected speedup, and that speedup."""
    return max(((k, expected_speedup(alpha, c, k)) for k in range(1, k_max + 1)), key=lambda kv: kv[1])


@dataclass
class _Ewma:
    """Exponentially weighted sums: recent rounds count more (decay per observation)."""

    decay: float
    total: float = 0.0
    weight: float = 0.0

    def add(self, value: float, weight: float = 1.0) -> None:
        self.total = self.total * self.decay + value * weight
        self.weight = self.weight * self.decay + weight

    @property
    def mean(self) -> float | None:
        return self.total / self.weight if self.weight > 0 else None


@dataclass
class KController:
    """Chooses k per round and decides when speculation has stopped paying.

    k_max: the largest k (the fixed k when not adaptive). warmup_rounds: rounds measured in a
    generation before a fallback decision. fallback_below: expected speedup under which the rest
    of the generation decodes plainly. Estimates persist across generations (an agent's calls look
    alike), and so does a fallback: the next `probe_every - 1` generations decode plainly from
    their first token, then one speculates again to re-measure. Without that memory a drafter
    that never pays (an untrained early exit) cost every generation its warm-up rounds: 16-18%
    more time per token than plain decoding in the bench harness on this CPU.
    """

    k_max: int
    adaptive: bool = True
    warmup_rounds: int = 6
    fallback_below: float = 0.95
    decay: float = 0.97
    probe_every: int = 8
    # Prior: a coin-flip acceptance and a verify cost growing 10% per extra token, worth two rounds.
    prior_alpha: float = 0.5
    prior_growth: float = 0.1
    _accepted: _Ewma = field(init=False)
    _rejected: _Ewma = field(init=False)
    _draft_per_token: _Ewma = field(init=False)
    _plain: _Ewma = field(init=False)
    _verify: dict[int, _Ewma] = field(init=False, default_factory=dict)
    rounds_this_generation: int = field(init=False, default=0)
    _plain_generations_left: int = field(init=False, default=0)
    _last_reason: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.k_max < 1:
            raise ValueError(f"k_max must be at least 1, got {self.k_max}")
        self._accepted = _Ewma(self.decay, 2 * self.prior_alpha, 1.0)
        self._rejected = _Ewma(self.decay, 2 * (1 - self.prior_alpha), 1.0)
        self._draft_per_token = _Ewma(self.decay)
        self._plain = _Ewma(self.decay)

    # -- observations ---------------------------------------------------------------------
    def start_generation(self) -> str | None:
        """Start counting a generation's rounds; returns why it should not speculate at all (an
        earlier generation found that speculation does not pay), or None."""
        self.rounds_this_generation = 0
        if self._plain_generations_left > 0:
            self._plain_generations_left -= 1
            return f"{self._last_reason} (measured in an earlier generation; speculating again in " \
                   f"{self._plain_generations_left + 1} generation(s))"
        return None

    def record_round(self, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        self.rounds_this_generation += 1
        self._accepted.add(accepted)
        self._rejected.add(1.0 if accepted < drafted else 0.0)
        if drafted:
            self._draft_per_token.add(draft_s / drafted, drafted)
        self._verify.setdefault(drafted + 1, _Ewma(self.decay)).add(verify_s)

    def record_plain_step(self, seconds: float) -> None:
        self._plain.add(seconds)

    # -- estimates --------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        a, r = self._accepted.total, self._rejected.total
        return a / (a + r) if a + r > 0 else self.prior_alpha

    def verify_line(self) -> tuple[float, float] | None:
        """(a, b) of verify seconds ≈ a + b·n, or None before anything was measured."""
        points = [(n, e.mean) for n, e in self._verify.items() if e.mean is not None]
        plain = self._plain.mean
        if plain is not None:
            points.append((1, plain))
        if not points:
            return None
        if len({n for n, _ in points}) == 1:
            n, t = points[0]
            a = t / (1 + self.prior_growth * (n - 1))  # one width only: lean on the prior slope
            return a * (1 - self.prior_growth), a * self.prior_growth
        ns = [n for n, _ in points]
        ts = [t for _, t in points]
        n_mean, t_mean = sum(ns) / len(ns), sum(ts) / len(ts)
        var = sum((n - n_mean) ** 2 for n in ns)
        b = max(0.0, sum((n - n_mean) * (t - t_mean) for n, t in zip(ns, ts, strict=True)) / var)
        a = max(t_mean - b * n_mean, 1e-9)
        return a, b

    @property
    def cost_ratio(self) -> float:
        """c: the cost of one more drafted token (drafting it + verifying it) over a plain step."""
        line = self.verify_line()
        if line is None or sum(line) <= 0:  # nothing measured yet (or a clock that never moves)
            return self.prior_growth
        a, b = line
        draft = self._draft_per_token.mean or 0.0
        return (draft + b) / (a + b)

    # -- decisions --------------------------------------------------------------------------
    def next_k(self) -> int:
        if not self.adaptive:
            return self.k_max
        return best_k(self.alpha, self.cost_ratio, self.k_max)[0]

    def fallback_reason(self) -> str | None:
        """Why to stop speculating in this generation, or None while it still pays. A reason
        returned here also makes the next `probe_every - 1` generations start plainly."""
        if self.rounds_this_generation < self.warmup_rounds:
            return None
        k = self.next_k()
        speedup = expected_speedup(self.alpha, self.cost_ratio, k)
        if speedup >= self.fallback_below:
            return None
        self._last_reason = (
            f"not_paying: acceptance {self.alpha:.2f}, cost ratio {self.cost_ratio:.2f}, "
            f"expected speedup {speedup:.2f}x at k={k}"
        )
        self._plain_generations_left = self.probe_every - 1
        return self._last_reason
