"""How many tokens to draft, and when to stop speculating.

The controller keeps `costmodel.RoundStats` over the rounds it is told about, exponentially
weighted so the estimates follow the workload, and asks the fitted `costmodel.CostModel` for the
k with the highest expected speedup. The model, the same one the report's what-if fits from a
trace, counts the verify pass's cost by width (on a CPU a forward over n tokens is far from free
in n: measured on the bundled model n=4 costs 1.55x and n=8 1.88x of n=1, so a cost that only
counted drafting would push k to its maximum for a free drafter like prompt lookup), the rounds
whose drafter proposed nothing (a plain step each) and how far drafts reach per position. Its
plain step is the mean of the one-token passes it is told about (no-draft rounds, plain steps),
else the verify line at one token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrace.core.costmodel import CostModel, RoundStats, best_k, expected_speedup, fit

__all__ = ["KController", "expected_speedup", "best_k"]


@dataclass
class KController:
    """Chooses k per round and decides when speculation has stopped paying.

    k_max: the largest k (the fixed k when not adaptive). warmup_rounds: rounds measured in a
    generation before a fallback decision. fallback_below: expected speedup under which the rest
    of the generation decodes plainly. explore_every: after this many rounds below k_max, one
    asks for k_max: the controller learns what wide verify passes cost only by running them, and
    without it wide passes timed in a slow spell kept k at 1-2 through a whole suite whose rounds,
    refitted alone, favoured k = 8 (bench harness, long_reasoning, this CPU).

    Estimates persist across generations (an agent's calls look alike), and so does a fallback: the next `probe_every - 1` generations decode plainly from
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
    explore_every: int = 16
    # Prior: a coin-flip acceptance worth `prior_rounds` rounds, and a verify cost growing 10% per
    # extra token until two widths are measured.
    prior_alpha: float = 0.5
    prior_growth: float = 0.1
    prior_rounds: float = 2.0
    stats: RoundStats = field(init=False)
    rounds_this_generation: int = field(init=False, default=0)
    _rounds_below_max: int = field(init=False, default=0)
    _plain_generations_left: int = field(init=False, default=0)
    _last_reason: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.k_max < 1:
            raise ValueError(f"k_max must be at least 1, got {self.k_max}")
        self.stats = RoundStats(self.decay)
        self.stats.add_prior(self.prior_alpha, self.prior_rounds)

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

    def record_round(self, drafted: int, accepted: int, draft_s: float, verify_s: float, k: int | None = None) -> None:
        """A round that asked for k (default k_max) tokens, got `drafted` and kept `accepted`."""
        self.rounds_this_generation += 1
        k = k if k is not None else self.k_max
        self._count_towards_probe(k)
        self.stats.add_round(drafted, accepted, draft_s, verify_s, k)

    def record_no_draft(self, k: int, step_s: float) -> None:
        """A round that asked for k tokens and got none, so it decoded a plain step of `step_s`."""
        self._count_towards_probe(k)
        self.stats.add_no_draft(k, step_s)

    def _count_towards_probe(self, k: int) -> None:
        self._rounds_below_max = 0 if k >= self.k_max else self._rounds_below_max + 1

    def record_plain_step(self, seconds: float) -> None:
        """A plain step outside speculation (after a fallback): a one-token pass, not a round."""
        self.stats.add_pass(1, seconds)

    # -- estimates --------------------------------------------------------------------------
    def model(self) -> CostModel:
        return fit(self.stats, prior_alpha=self.prior_alpha, prior_growth=self.prior_growth)

    @property
    def alpha(self) -> float:
        a = self.stats.alpha
        return a if a is not None else self.prior_alpha

    def verify_line(self) -> tuple[float, float] | None:
        """(a, b) of verify seconds ≈ a + b·n, or None before anything was measured."""
        line = self.stats.verify_line(self.prior_growth)
        return (line.fixed_s, line.per_token_s) if line is not None else None

    @property
    def cost_ratio(self) -> float:
        """c: the cost of one more drafted token (drafting it + verifying it) over a plain step."""
        return self.model().c

    # -- decisions --------------------------------------------------------------------------
    def next_k(self) -> int:
        if not self.adaptive or (self.explore_every and self._rounds_below_max >= self.explore_every):
            return self.k_max
        return self.model().best_k(self.k_max)[0]

    def fallback_reason(self) -> str | None:
        """Why to stop speculating in this generation, or None while it still pays. A reason
        returned here also makes the next `probe_every - 1` generations start plainly."""
        if self.rounds_this_generation < self.warmup_rounds:
            return None
        model = self.model()
        k = model.best_k(self.k_max)[0] if self.adaptive else self.k_max
        speedup = model.speedup(k)
        if speedup >= self.fallback_below:
            return None
        self._last_reason = (
            f"not_paying: acceptance {model.alpha:.2f}, cost ratio {model.c:.2f}, "
            f"expected speedup {speedup:.2f}x at k={k}"
        )
        self._plain_generations_left = self.probe_every - 1
        return self._last_reason
