"""Speculation what-if: from each drafter's rounds in the trace, the expected speedup for k = 1..10
draft tokens, the best k, how far the run's k was from it, and the prediction for the run's own
rounds beside the measured speedup.

The model is `agenttrace.core.costmodel`, the one the generator's k controller uses:
tokens per round from acceptance and drafting by position, the round's cost as draft time plus a
verify pass whose cost grows with its width (fitted from the rounds' verify times), and the rounds
whose drafter proposed nothing (one plain step each). Per (run label, spec method) the trace gives:
- alpha: maximum likelihood over the rounds (see `spec.AcceptanceStats`): accepted tokens over
  accepted tokens plus rounds that ended in a rejection.
- the plain step, the unit every cost is measured in: the decode time per step of plain
  generations of the same model in the set (the plain arm). Without one it is estimated, and
  labelled so: the no-draft steps are untimed, but generations mixing them with rounds in
  different proportions let a least-squares fit split the time outside the timers between the
  two (`split_untimed`); failing that, the verify line at one token plus the loop's time per pass.
- the loop's time per round outside the draft and verify timers (stop checks, streaming): the
  speculative generations' decode time less their draft, verify and no-draft steps' time.
`measured_speedup` is measured only with a plain arm: decode time per token of its generations over
the speculative ones', totals over the set (a median per generation weighs a 5-token answer like a
64-token one: on a demo trace it read 1.14x where the totals read 1.44x); otherwise it is the
estimate above, and `measured_speedup_source` says which.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agenttrace.core.costmodel import CostModel, fit
from agenttrace.report.model import GenerationFigures, SpeedupPoint, WhatIf
from agenttrace.report.spec import AcceptanceStats

if TYPE_CHECKING:
    from agenttrace.report.figures import TaskAnalysis

K_RANGE = range(1, 11)
SOURCE_PLAIN_ARM = "plain arm"


def speedup_curve(model: CostModel, ks: range = K_RANGE) -> list[SpeedupPoint]:
    return [SpeedupPoint(k=k, speedup=model.speedup(k), tokens_per_round=model.tokens_per_verify(k)) for k in ks]


@dataclass
class Untimed:
    """Least-squares sums for `split_untimed`, generation by generation: x no-draft rounds, y
    drafting rounds, t seconds outside the draft and verify timers."""

    n: int = 0
    sxx: float = 0.0
    syy: float = 0.0
    sxy: float = 0.0
    sxt: float = 0.0
    syt: float = 0.0

    def add(self, x: float, y: float, t: float) -> None:
        self.n += 1
        self.sxx += x * x
        self.syy += y * y
        self.sxy += x * y
        self.sxt += x * t
        self.syt += y * t

    def solve(self) -> tuple[float, float] | None:
        """(plain step, loop time per drafting round) by least squares of t = x·step + y·loop;
        None when the generations do not tell the two apart (fewer than two, proportions alike,
        or a coefficient that is not positive)."""
        det = self.sxx * self.syy - self.sxy * self.sxy
        if self.n < 2 or det <= 1e-9 * max(self.sxx * self.syy, 1e-300):
            return None
        step = (self.sxt * self.syy - self.syt * self.sxy) / det
        loop = (self.syt * self.sxx - self.sxt * self.sxy) / det
        if loop < 0:  # noise: no loop time per round, all of it on the steps
            step, loop = self.sxt / self.sxx, 0.0
        return (step, loop) if step > 0 else None


@dataclass
class Decoding:
    """Decode time (after the prefill) and output tokens of generations whose decode time is known,
    and of that time what the draft and verify timers did not see."""

    decode_s: float = 0.0
    outside_s: float = 0.0
    tokens: int = 0
    steps: int = 0  # tokens after the first (the prefill made the first)
    untimed: Untimed = field(default_factory=Untimed)  # (no-draft rounds, drafting rounds, outside) sums

    def add(self, g: GenerationFigures) -> None:
        if g.decode_s_per_token:
            d = g.decode_s_per_token * g.output_tokens
            outside = d - g.draft_s - g.verify_s
            self.decode_s += d
            self.outside_s += outside
            self.tokens += g.output_tokens
            self.steps += g.output_tokens - 1
            no_draft = max(0, g.output_tokens - 1 - g.rounds - g.accepted_tokens)  # as spec.py infers them
            self.untimed.add(float(no_draft), float(g.rounds), outside)

    @property
    def per_token_s(self) -> float | None:
        """Decode time per output token over all the generations: the figure speculation changes."""
        return self.decode_s / self.tokens if self.tokens and self.decode_s > 0 else None

    @property
    def step_s(self) -> float | None:
        return self.decode_s / self.steps if self.steps and self.decode_s > 0 else None


def split_untimed(generations: Iterable[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(plain step, loop time per drafting round) from (no-draft rounds, drafting rounds, decode
    seconds outside the draft and verify timers) per generation, by least squares of
    outside = no_draft·step + rounds·loop. A trace does not time the no-draft steps; generations
    that mix them with rounds in different proportions tell the two apart (see Untimed.solve)."""
    sums = Untimed()
    for x, y, t in generations:
        sums.add(x, y, t)
    return sums.solve()


@dataclass
class DrafterGenerations:
    """What the what-if of one drafter needs of its generations, added one at a time."""

    generations: int = 0
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    ks: Counter = field(default_factory=Counter)
    models: Counter = field(default_factory=Counter)
    decoding: Decoding = field(default_factory=Decoding)

    def add(self, g: GenerationFigures) -> None:
        self.generations += 1
        self.rounds += g.rounds
        self.draft_tokens += g.draft_tokens
        self.accepted_tokens += g.accepted_tokens
        if g.num_speculative_tokens:
            self.ks[g.num_speculative_tokens] += 1
        self.models[g.model] += 1
        self.decoding.add(g)


def _plain_step(plain: Decoding | None, spec: Decoding, rounds: int, no_draft: float,
                verify_one_s: float) -> tuple[float, float, str]:
    """(plain step, loop time per drafting round, where the step came from). The loop time is
    the speculative decode time the draft and verify timers do not see, less the no-draft rounds'
    plain steps."""
    if plain and plain.step_s:
        overhead = max(0.0, spec.outside_s - no_draft * plain.step_s) / rounds if rounds else 0.0
        return plain.step_s, overhead, SOURCE_PLAIN_ARM
    split = spec.untimed.solve()
    if split:
        return (*split, f"estimated: the decode time outside the draft and verify timers split by least squares "
                        f"between no-draft steps and rounds over {spec.untimed.n} generations")
    # Every pass, plain step or round, taken to pay the same loop time on top of its forward.
    passes = rounds + no_draft
    overhead = max(0.0, spec.outside_s - no_draft * verify_one_s) / passes if passes else 0.0
    return verify_one_s + overhead, overhead, "estimated: the verify line at one token plus the loop's time per pass"


def whatif_for(label: str | None, method: str, gens: DrafterGenerations, stats: AcceptanceStats,
               plain: Decoding | None, *, constrained: bool = False) -> WhatIf:
    """The what-if of one drafter from its generations and their pooled round statistics."""
    alpha = stats.alpha
    rs = stats.cost
    draft_per_token = stats.draft_s / stats.draft_tokens if stats.draft_tokens else None
    verify_per_round = stats.verify_s / stats.rounds if stats.rounds and stats.verify_s > 0 else None
    actual_k = gens.ks.most_common(1)[0][0] if gens.ks else 0
    line = rs.verify_line()
    spec = gens.decoding
    model: CostModel | None = None
    overhead = step_source = None
    if alpha is not None and line is not None:
        plain_step, overhead, step_source = _plain_step(plain, spec, stats.rounds, rs.no_draft, line.at(1))
        model = fit(rs, alpha=alpha, plain_step_s=plain_step, overhead_s=overhead)
    curve = speedup_curve(model) if model else []
    best = max(curve, key=lambda p: p.speedup) if curve else None  # max() keeps the first (smallest k) on ties
    at_actual = model.speedup(actual_k) if model and actual_k else None
    if plain and plain.per_token_s and spec.per_token_s:
        measured, basis, source = (plain.per_token_s / spec.per_token_s, "decode time per token of the plain "
                                   "generations of this model in the set over the speculative ones' (totals)",
                                   SOURCE_PLAIN_ARM)
    elif model and spec.step_s:
        source = f"{step_source} (no plain generation of this model in the set)"
        measured, basis = model.plain_step_s / spec.step_s, source
    else:
        measured, basis, source = None, None, None
    rounds, accepted = gens.rounds, gens.accepted_tokens
    return WhatIf(
        label=label,
        method=method,
        constrained=constrained,
        generations=gens.generations,
        rounds=rounds,
        draft_tokens=gens.draft_tokens,
        accepted_tokens=accepted,
        alpha=alpha,
        alpha_estimator=stats.estimator,
        c=model.c if model else None,
        draft_s_per_token=draft_per_token,
        verify_s_per_round=verify_per_round,
        actual_k=actual_k,
        curve=curve,
        best_k=best.k if best else None,
        best_speedup=best.speedup if best else None,
        speedup_at_actual_k=at_actual,
        best_over_actual=best.speedup / at_actual if best and at_actual else None,
        measured_mean_acceptance_length=1.0 + accepted / rounds if rounds else None,
        predicted_mean_acceptance_length=model.tokens_per_verify(actual_k) if model and actual_k else None,
        measured_speedup=measured,
        measured_speedup_basis=basis,
        measured_speedup_source=source,
        predicted_speedup=(model.speedup_mix(rs.asked) or at_actual) if model else None,
        plain_step_s=model.plain_step_s if model else None,
        plain_step_source=step_source,
        verify_s_fixed=line.fixed_s if line else None,
        verify_s_per_token=line.per_token_s if line else None,
        verify_cost_source=line.source if line else None,
        overhead_s_per_round=overhead,
        no_draft_rounds=round(rs.no_draft),
        acceptance_by_position=list(model.acceptance) if model else [],
    )


class WhatIfFold:
    """The what-ifs of tasks added one at a time: one per (run label, speculative method,
    constrained or not) present, in first-seen order, from the sums it needs (memory does not grow
    with the generations). A grammar changes what is drafted and verified (refused drafts are
    cut), so constrained generations are never pooled with unconstrained ones, nor measured
    against their plain arm."""

    def __init__(self) -> None:
        self.gens: defaultdict[tuple[str | None, str, bool], DrafterGenerations] = defaultdict(DrafterGenerations)
        self.stats: dict[tuple[str | None, str], AcceptanceStats] = {}
        self.plain: dict[tuple[str | None, bool], Decoding] = defaultdict(Decoding)  # by model and constraint

    def add(self, a: TaskAnalysis) -> None:
        label = a.figures.run_label
        for step in a.figures.steps:
            for g in step.generations:
                if g.method == "none":
                    self.plain[(g.model, g.constrained)].add(g)
                else:
                    self.gens[(label, g.method, g.constrained)].add(g)
        for method, st in a.acceptance:
            if method != "none":
                self.stats.setdefault((label, method), AcceptanceStats()).merge(st)

    def figures(self) -> list[WhatIf]:
        out = []
        for (label, method, constrained), gs in self.gens.items():
            arm = self.plain.get((gs.models.most_common(1)[0][0], constrained))
            out.append(whatif_for(label, method, gs, self.stats.get((label, method), AcceptanceStats()), arm,
                                  constrained=constrained))
        return out
