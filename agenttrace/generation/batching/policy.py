"""The speculation cost model (costmodel.py) in a batch: what a batched pass costs by its rows,
and how many draft tokens each request may add to it. Torch-free, like the cost model.

A request's acceptance comes from its own controller (`CostModel.reach_by_position`); the pass's
cost from the engine's measured passes (`PassCost`). The speedup formula of a request alone,
S(k) = T(k)·plain / R(k), becomes a question of the batch's throughput: a draft token is worth
adding when the tokens it is expected to yield per second of the extra pass time it costs beat
what the pass already yields per second.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from agenttrace.core.costmodel import PRIOR_GROWTH, CostModel, VerifyLine, fit_verify_line

__all__ = ["BatchChoice", "PassCost", "allocate_batch_k"]


@dataclass
class PassCost:
    """Seconds of a batched pass by its rows, fitted with decay (recent passes count more)."""

    decay: float = 0.98
    widths: dict[int, list[float]] = field(default_factory=dict)  # rows -> [weight, seconds]

    def add(self, rows: int, seconds: float) -> None:
        for w in self.widths.values():
            w[0] *= self.decay
            w[1] *= self.decay
        w = self.widths.setdefault(rows, [0.0, 0.0])
        w[0] += 1.0
        w[1] += seconds

    def line(self) -> VerifyLine:
        fitted = fit_verify_line(((n, w, s) for n, (w, s) in self.widths.items()), PRIOR_GROWTH)
        return fitted if fitted is not None else VerifyLine(0.9, 0.1, 0)  # before any pass: the prior's shape


@dataclass(frozen=True)
class BatchChoice:
    """The k a request may draft in a batched pass, and why (its policy reason)."""

    k: int
    reason: str


def allocate_batch_k(models: list[tuple[CostModel | None, int]], base_rows: int, line: VerifyLine,
                     batch_size: int) -> list[BatchChoice]:
    """Each request's k for one batched pass of `batch_size` requests, its rows `base_rows`
    before any draft (a pending token per decoding request, prefill chunks), costing
    line.at(rows) seconds. models: per decoding request its CostModel (None: it does not
    speculate) and its k_max.

    A draft token at position i of request r is worth P_r(accepted >= i) tokens and costs
    P_r(drafted >= i)·(D_r + b) seconds (drafting it, one more row of the pass). Rows are added
    best value first while their tokens per second beat the pass's own: at batch 1 a CPU's pass
    is bound by reading the weights, b is small and drafts pay; as the batch grows each row costs
    about b while the pass already returns about 1/b tokens per second, so a draft worth less
    than a token stops paying, down to k = 0 (the speculation paradox, measured not assumed)."""
    tokens = float(sum(1 for m in models))  # every decoding request gets its next token
    seconds = line.at(max(base_rows, 1))
    ks = [0] * len(models)
    reach = [m.reach_by_position(k) if m is not None else [] for m, k in models]
    heap = []
    for r, (m, _) in enumerate(models):
        if reach[r]:
            heapq.heappush(heap, (*_value(m, reach[r], 0, line), r))
    last: dict[int, str] = {}
    while heap:
        neg_rate, gain, cost, r = heapq.heappop(heap)
        rate = tokens / seconds
        if -neg_rate <= rate:
            last[r] = (f"k={ks[r]} at batch {batch_size}: draft token {ks[r] + 1} would add {gain:.2f} tokens for "
                       f"{cost * 1e3:.2f} ms, below the pass's {rate / 1e3:.3f} tokens/ms")
            continue  # later positions are worth less still: this request stops here
        ks[r] += 1
        tokens += gain
        seconds += cost
        if ks[r] < len(reach[r]):
            heapq.heappush(heap, (*_value(models[r][0], reach[r], ks[r], line), r))
    out = []
    for r, (m, k_max) in enumerate(models):
        if m is None:
            out.append(BatchChoice(0, ""))
        else:
            out.append(BatchChoice(ks[r], last.get(r, f"k={ks[r]} at batch {batch_size}: every draft token up to "
                                                      f"k_max={k_max} pays")))
    return out


def _value(model: CostModel, reach: list[tuple[float, float]], i: int, line: VerifyLine) -> tuple[float, float, float]:
    drafted, accepted = reach[i]
    cost = max(drafted * (model.draft_s_per_token + line.per_token_s), 1e-12)
    return -accepted / cost, accepted, cost
