"""What speculation gains, defined once: the tokens a round yields and what it costs, in units of
one plain decoding step. The k controller (adaptive.py), the report's what-if (report/whatif.py)
and the verify-cost bench all use this module; it imports neither torch nor numpy.

A round asks the drafter for up to k tokens. The drafter proposes d <= k of them (prompt lookup
proposes nothing when it finds no match, and fewer than k after a short match), costing
draft(d) = D·d; one target forward then scores the pending token and the draft, n = d + 1 tokens,
costing verify(n) = a + b·n, fitted from the rounds' verify passes by width (on a CPU a forward
over n tokens is far from free in n). A round that drafted nothing is a plain step: one token for
one plain step's time. The plain step is timed apart (plain steps, a plain arm), not read off the
line where it can be: a one-token forward takes a faster path, ~1.3x below the line through the
wider passes on the bench's CPU. Per position i the model keeps

    h_i  P(the drafter proposes token i | it proposed i - 1 and k allowed i)
    a_i  P(the target accepts token i | it was proposed and tokens 1..i-1 were accepted)

so with a round asking for k tokens

    P(drafted >= i) = h_1···h_i,  P(accepted >= i) = h_1 a_1···h_i a_i,
    T(k) = 1 + Σ_{i<=k} P(accepted >= i)                         tokens per round
    R(k) = (1 - h_1)·plain + h_1·(a + b + o) + (D + b)·Σ_{i<=k} P(drafted >= i)    seconds per round
    S(k) = T(k)·plain / R(k)                                     speedup over plain decoding

with o the loop's time per round outside the draft and verify timers (the what-if measures it; the
controller has none). With h_i = 1, a_i = α, o = 0 and plain = a + b this is Leviathan et al.
2023: S(k) = (1 - α^(k+1)) / ((1 - α)(k·c + 1)) with c = (D + b) / (a + b).

Estimates come from `RoundStats`, sums over recorded rounds that can decay so the controller
follows the workload (the what-if uses plain sums): α by maximum likelihood for a geometric run
(accepted tokens over accepted tokens plus rejections), a_i and h_i per position shrunk towards
the pooled value (h_1 towards 1) by `SHRINK` pseudo-rounds (one round at a position must not
decide it), and positions past those recorded taking the pooled value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "SHRINK", "PRIOR_GROWTH", "CostModel", "RoundStats", "VerifyLine",
    "best_k", "best_k_at_widths", "expected_speedup", "fit", "fit_verify_line", "tokens_per_round",
]

# Pseudo-rounds pulling a position's estimate towards the pooled one.
SHRINK = 2.0
# Verify cost growth per extra token scored, as a share of a one-token pass, when only one width
# was measured (no slope can be fitted): the controller's prior.
PRIOR_GROWTH = 0.1


# -- the scalar (Leviathan) form ---------------------------------------------------------------
def tokens_per_round(alpha: float, k: int) -> float:
    """Expected tokens per target pass with k drafts accepted i.i.d. with probability alpha:
    (1 - alpha^(k+1)) / (1 - alpha), the target's own token included."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, c: float, k: int) -> float:
    """S(k) = tokens_per_round(alpha, k) / (k·c + 1): c is the cost of one more drafted token
    (drafting it plus verifying it) over a plain step, and a one-token verify costs a plain step."""
    if k <= 0:
        return 1.0
    return tokens_per_round(alpha, k) / (k * c + 1.0)


def best_k(alpha: float, c: float, k_max: int) -> tuple[int, float]:
    """The k in 1..k_max with the highest `expected_speedup`, and that speedup (smallest k on ties)."""
    return max(((k, expected_speedup(alpha, c, k)) for k in range(1, k_max + 1)), key=lambda kv: kv[1])


def best_k_at_widths(alpha: float, verify_s: Mapping[int, float], plain_s: float,
                     draft_s_per_token: float = 0.0) -> tuple[int, float] | None:
    """The best k among timed verify widths (k = n - 1 for each n >= 2), each round costing its
    drafting plus its measured verify time: c at k is (D·k + verify(k+1) - plain) / (k·plain),
    so k·c + 1 is the round's cost in plain steps. For a curve that is no line (past the knee)."""
    options = [(n - 1, expected_speedup(alpha, (draft_s_per_token * (n - 1) + t - plain_s) / ((n - 1) * plain_s), n - 1))
               for n, t in sorted(verify_s.items()) if n >= 2]
    return max(options, key=lambda kv: kv[1]) if options else None


# -- verify cost by width ----------------------------------------------------------------------
@dataclass(frozen=True)
class VerifyLine:
    """Seconds of a target forward over n tokens: fixed_s + per_token_s·n."""

    fixed_s: float
    per_token_s: float
    widths: int = 0  # distinct widths fitted; 1: the slope is the prior; 0: nothing measured

    def at(self, n: float) -> float:
        return self.fixed_s + self.per_token_s * n

    @property
    def source(self) -> str:
        if self.widths >= 2:
            return f"fitted over {self.widths} widths"
        if self.widths == 1:
            return f"estimated: one width measured, slope from the prior ({PRIOR_GROWTH:g} of a one-token pass per token)"
        return "estimated: nothing measured (prior)"


def fit_verify_line(points: Iterable[tuple[int, float, float]], prior_growth: float = PRIOR_GROWTH) -> VerifyLine | None:
    """Weighted least squares over (width n, weight, summed seconds) per width: the weights are
    the passes (decayed, for the controller), so with plain counts it is the fit over all passes.
    The slope is kept >= 0 (noise must not make wider passes cheaper). None when nothing was timed."""
    pts = [(n, w, s / w) for n, w, s in points if w > 0]
    if not pts:
        return None
    if len({n for n, _, _ in pts}) == 1:
        n, w, t = pts[0]
        one = t / (1.0 + prior_growth * (n - 1))  # the pass at n = 1 under the prior slope
        return VerifyLine(one * (1.0 - prior_growth), one * prior_growth, 1)
    total = sum(w for _, w, _ in pts)
    n_mean = sum(n * w for n, w, _ in pts) / total
    t_mean = sum(t * w for _, w, t in pts) / total
    var = sum(w * (n - n_mean) ** 2 for n, w, _ in pts)
    cov = sum(w * (n - n_mean) * (t - t_mean) for n, w, t in pts)
    b = max(0.0, cov / var)
    return VerifyLine(max(t_mean - b * n_mean, 1e-12), b, len({n for n, _, _ in pts}))


# -- what the rounds tell ----------------------------------------------------------------------
@dataclass
class RoundStats:
    """Sufficient statistics of recorded rounds. With `decay` < 1 every round first scales all
    of them, timings by width included, so recent rounds count more and a width not tried lately
    weighs little against a fresh one: a slow spell's wide passes must not set the slope for good
    (the controller revisits wide drafts to refresh them). Lists are by position (index i - 1)."""

    decay: float = 1.0
    accepted: float = 0.0  # accepted draft tokens
    rejections: float = 0.0  # rounds that ended in a rejection
    drafted: float = 0.0
    draft_s: float = 0.0
    rounds: float = 0.0  # rounds that drafted (verify passes)
    no_draft: float = 0.0  # rounds whose drafter proposed nothing
    offered: list[float] = field(default_factory=list)  # k allowed position i and i - 1 was proposed
    proposed: list[float] = field(default_factory=list)  # ... and the drafter proposed it
    judged: list[float] = field(default_factory=list)  # position i proposed and 1..i-1 accepted
    passed: list[float] = field(default_factory=list)  # ... and accepted
    widths: dict[int, list[float]] = field(default_factory=dict)  # n -> [weight, seconds]
    asked: dict[int, float] = field(default_factory=dict)  # rounds by the k asked for

    def _age(self) -> None:
        if self.decay == 1.0:
            return
        d = self.decay
        self.accepted *= d
        self.rejections *= d
        self.drafted *= d
        self.draft_s *= d
        self.rounds *= d
        self.no_draft *= d
        for xs in (self.offered, self.proposed, self.judged, self.passed):
            xs[:] = [x * d for x in xs]
        for k in self.asked:
            self.asked[k] *= d
        for w in self.widths.values():
            w[0] *= d
            w[1] *= d

    @staticmethod
    def _bump(xs: list[float], upto: int, weight: float = 1.0) -> None:
        if len(xs) < upto:
            xs.extend([0.0] * (upto - len(xs)))
        for i in range(upto):
            xs[i] += weight

    def _timed(self, n: int, seconds: float) -> None:
        w = self.widths.setdefault(n, [0.0, 0.0])
        w[0] += 1.0
        w[1] += seconds

    def add_pass(self, n: int, seconds: float) -> None:
        """A timed target forward over n tokens outside a round (a plain step after a fallback):
        it ages only its own width's timings, not the rounds."""
        w = self.widths.setdefault(n, [0.0, 0.0])
        w[0] *= self.decay
        w[1] *= self.decay
        self._timed(n, seconds)

    def add_round(self, drafted: int, accepted: int, draft_s: float, verify_s: float | None, k: int) -> None:
        """A round that asked for up to k tokens, got `drafted` (>= 1) and kept `accepted`."""
        self._age()
        k = max(k, drafted)
        self.rounds += 1
        self.drafted += drafted
        self.draft_s += draft_s
        self.accepted += accepted
        self.rejections += 1.0 if accepted < drafted else 0.0
        self.asked[k] = self.asked.get(k, 0.0) + 1.0
        self._bump(self.offered, min(k, drafted + 1))  # positions 1..drafted+1, as far as k allowed
        self._bump(self.proposed, drafted)
        self._bump(self.judged, min(drafted, accepted + 1))
        self._bump(self.passed, accepted)
        if verify_s is not None:
            self._timed(drafted + 1, verify_s)

    def add_no_draft(self, k: int, step_s: float | None = None) -> None:
        """A round that asked for k >= 1 tokens and got none: it decoded one plain step. (Its
        drafter's search is not counted: a trace does not record it, and prompt lookup's is
        microseconds.)"""
        self._age()
        self.no_draft += 1
        self.asked[k] = self.asked.get(k, 0.0) + 1.0
        self._bump(self.offered, 1)
        if step_s is not None:
            self._timed(1, step_s)

    def add_prior(self, alpha: float, weight: float) -> None:
        """`weight` pseudo-rounds of acceptance alpha (they decay like real ones)."""
        self.accepted += weight * alpha
        self.rejections += weight * (1.0 - alpha)

    def merge(self, other: RoundStats) -> None:
        """Add another set of plain sums (the what-if pools generations)."""
        for name in ("accepted", "rejections", "drafted", "draft_s", "rounds", "no_draft"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.offered, other.offered), (self.proposed, other.proposed),
                             (self.judged, other.judged), (self.passed, other.passed)):
            for i, x in enumerate(theirs):
                self._bump(mine, i + 1, 0.0)
                mine[i] += x
        for n, (w, s) in other.widths.items():
            mine_w = self.widths.setdefault(n, [0.0, 0.0])
            mine_w[0] += w
            mine_w[1] += s
        for k, w in other.asked.items():
            self.asked[k] = self.asked.get(k, 0.0) + w

    @property
    def alpha(self) -> float | None:
        judged = self.accepted + self.rejections
        return self.accepted / judged if judged > 0 else None

    def verify_line(self, prior_growth: float = PRIOR_GROWTH) -> VerifyLine | None:
        """The line over verify passes (n >= 2). One-token passes stay off it: on a CPU the
        n = 1 forward takes a faster kernel path, the line through n >= 2 meets n = 1 about 1.3x
        above it (bench traces), so a line through both would tilt."""
        return fit_verify_line(((n, w, s) for n, (w, s) in self.widths.items() if n >= 2), prior_growth)

    @property
    def plain_step_s(self) -> float | None:
        """Mean time of the timed one-token passes (plain steps, no-draft rounds), if any."""
        w, s = self.widths.get(1, (0.0, 0.0))
        return s / w if w > 0 and s > 0 else None


# -- the fitted model --------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    """Per-position acceptance and drafting, draft and verify costs, and the plain step they are
    measured against (see the module docstring). Positions past the tuples take the tails."""

    alpha: float
    acceptance: tuple[float, ...]  # a_i
    continuation: tuple[float, ...]  # h_i (h_1: the share of rounds that drafted at all)
    continuation_tail: float  # h_i past the recorded positions (i >= 2)
    draft_s_per_token: float  # D
    verify: VerifyLine
    plain_step_s: float  # the unit: one plain decoding step
    overhead_s: float = 0.0  # o: per drafting round, outside the draft and verify timers

    def _a(self, i: int) -> float:
        return self.acceptance[i - 1] if i <= len(self.acceptance) else self.alpha

    def _h(self, i: int) -> float:
        if i <= len(self.continuation):
            return self.continuation[i - 1]
        return 1.0 if i == 1 else self.continuation_tail

    def _reach(self, k: int) -> tuple[float, float]:
        """(Σ_{i<=k} P(drafted >= i), Σ_{i<=k} P(accepted >= i)) for a round asking for k."""
        by_position = self.reach_by_position(k)
        return sum(d for d, _ in by_position), sum(a for _, a in by_position)

    def reach_by_position(self, k: int) -> list[tuple[float, float]]:
        """Per position i <= k: (P(drafted >= i), P(accepted >= i))."""
        out, p_d, p_a = [], 1.0, 1.0
        for i in range(1, k + 1):
            p_d *= self._h(i)
            p_a *= self._h(i) * self._a(i)
            out.append((p_d, p_a))
        return out

    @property
    def drafting_share(self) -> float:
        """h_1: the share of rounds whose drafter proposed something."""
        return self._h(1)

    @property
    def c(self) -> float:
        """The cost of one more drafted token (drafting it plus the wider verify) over a plain step."""
        return (self.draft_s_per_token + self.verify.per_token_s) / self.plain_step_s

    def tokens_per_round(self, k: int) -> float:
        """T(k): expected tokens per round, no-draft rounds (one token) included."""
        return 1.0 + self._reach(k)[1] if k > 0 else 1.0

    def tokens_per_verify(self, k: int) -> float:
        """Expected tokens per round that drafted (per verify pass): 1 + accepted / rounds."""
        h1 = self.drafting_share
        return 1.0 + self._reach(k)[1] / h1 if k > 0 and h1 > 0 else 1.0

    def drafted_per_round(self, k: int) -> float:
        """Expected draft tokens proposed by a round that drafted."""
        h1 = self.drafting_share
        return self._reach(k)[0] / h1 if k > 0 and h1 > 0 else 0.0

    def round_s(self, k: int) -> float:
        """R(k): expected seconds per round asking for k (k = 0: one plain step)."""
        if k <= 0:
            return self.plain_step_s
        h1 = self.drafting_share
        drafted = self._reach(k)[0]
        v = self.verify
        return ((1.0 - h1) * self.plain_step_s + h1 * (v.at(1) + self.overhead_s)
                + (self.draft_s_per_token + v.per_token_s) * drafted)

    def speedup(self, k: int) -> float:
        """S(k): decode time per token of plain decoding over speculating with k."""
        return self.tokens_per_round(k) * self.plain_step_s / self.round_s(k)

    def speedup_mix(self, asked: Mapping[int, float]) -> float | None:
        """The speedup of rounds asking for k with these weights (an adaptive run's own rounds)."""
        total = sum(asked.values())
        if total <= 0:
            return None
        tokens = sum(w * self.tokens_per_round(k) for k, w in asked.items())
        seconds = sum(w * self.round_s(k) for k, w in asked.items())
        return tokens * self.plain_step_s / seconds

    def best_k(self, k_max: int) -> tuple[int, float]:
        """The k in 1..k_max with the highest speedup, and that speedup (smallest k on ties)."""
        return max(((k, self.speedup(k)) for k in range(1, k_max + 1)), key=lambda kv: kv[1])


def _shrunk(hits: list[float], trials: list[float], towards: float) -> tuple[float, ...]:
    """Per position (hits + SHRINK·towards) / (trials + SHRINK); a position tried but never hit
    has no entry in `hits`."""
    hits = hits + [0.0] * (len(trials) - len(hits))
    return tuple((h + SHRINK * towards) / (t + SHRINK) for h, t in zip(hits, trials, strict=True))


def fit(stats: RoundStats, *, alpha: float | None = None, plain_step_s: float | None = None,
        overhead_s: float = 0.0, prior_alpha: float = 0.5, prior_growth: float = PRIOR_GROWTH) -> CostModel:
    """The model the rounds support. alpha: override the rounds' own estimate (a trace with only
    totals); plain_step_s: the plain step measured elsewhere (else the rounds' timed one-token
    passes, else the verify line at one token); a model fitted on nothing timed measures in plain
    steps with the prior verify growth."""
    alpha = alpha if alpha is not None else (stats.alpha if stats.alpha is not None else prior_alpha)
    alpha = min(max(alpha, 0.0), 1.0)
    line = stats.verify_line(prior_growth)
    draft_s_per_token = stats.draft_s / stats.drafted if stats.drafted > 0 else 0.0
    if line is None or line.at(1) <= 0:  # nothing timed yet, or a clock that never moved
        # The prior, in seconds when a plain step is known, else in plain steps (then drafting,
        # timed in seconds, cannot be compared and counts as free).
        unit = plain_step_s or 1.0
        line = VerifyLine(unit * (1.0 - prior_growth), unit * prior_growth, 0)
        draft_s_per_token = draft_s_per_token if plain_step_s else 0.0
    plain = plain_step_s or stats.plain_step_s or line.at(1)
    # h_1 is its own thing (did a match exist at all) and leans towards 1, Leviathan's drafter
    # that always drafts: one early no-draft round must not make every k look alike (S = 1).
    # Later positions pool towards each other.
    # `proposed` is shorter than `offered` when no round drafted at a position (no-draft rounds
    # offer position 1 and propose nothing): a missing entry is zero proposals
    first = stats.proposed[0] if stats.proposed else 0.0
    h1 = (first + SHRINK) / (stats.offered[0] + SHRINK) if stats.offered else 1.0
    later_offered, later_proposed = sum(stats.offered[1:]), sum(stats.proposed[1:])
    tail = later_proposed / later_offered if later_offered > 0 else 1.0
    continuation = (h1, *_shrunk(stats.proposed[1:], stats.offered[1:], tail)) if stats.offered else ()
    return CostModel(
        alpha=alpha,
        acceptance=_shrunk(stats.passed, stats.judged, alpha),
        continuation=continuation,
        continuation_tail=tail,
        draft_s_per_token=draft_s_per_token,
        verify=line,
        plain_step_s=plain,
        overhead_s=overhead_s,
    )
