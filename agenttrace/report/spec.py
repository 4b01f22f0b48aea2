"""Speculation figures of generation spans: per generation, and the acceptance statistics the
what-if needs (`AcceptanceStats`), read from whatever the trace has.

Per-round data comes from the `speculate.round` events (default detail) or the
`speculate.draft` / `speculate.verify` child spans (detail `fine`); traces from other tools may
carry only the `agenttrace.spec.*` totals on the generation span.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.core.costmodel import RoundStats
from agenttrace.core.roofline import RooflinePhase
from agenttrace.report.model import GenerationFigures, SpecFigures, lean
from agenttrace.report.span_tree import SpanTree
from agenttrace.traces.span_records import SpanRecord

NS = 1e9

# How alpha was estimated, best first (see AcceptanceStats).
ESTIMATOR_ROUNDS = "rounds"
ESTIMATOR_POSITIONS = "positions"
ESTIMATOR_RATIO = "accepted/drafted"
_RANK = {ESTIMATOR_ROUNDS: 0, ESTIMATOR_POSITIONS: 1, ESTIMATOR_RATIO: 2}


@dataclass(slots=True)
class AcceptanceStats:
    """Sufficient statistics for the per-token acceptance probability alpha.

    Under the i.i.d. model of Leviathan et al. each drafted token is accepted with probability
    alpha until the first rejection, and the tokens after it are never judged. A round that drafted
    d and accepted a < d shows a acceptances and one rejection; a = d shows d acceptances. The
    maximum-likelihood estimate is accepted / (accepted + rejections). (accepted / drafted counts
    the unjudged tokens as rejected and underestimates alpha.)

    `estimator` says where the rejections came from: "rounds" (per-round data), "positions"
    (`acceptance_per_position`: rejections = rounds - rounds that accepted position k, exact when
    every round drafted k), or "accepted/drafted" (only totals: rejections = drafted - accepted).
    `cost`: what the rounds tell the cost model (per position, verify time by width, the rounds
    that drafted nothing); with only totals, one verify width (the mean) and no positions.
    """

    accepted: int = 0
    rejections: int = 0
    draft_tokens: int = 0
    rounds: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    estimator: str = ESTIMATOR_ROUNDS
    cost: RoundStats = field(default_factory=RoundStats)

    def merge(self, other: AcceptanceStats) -> None:
        self.cost.merge(other.cost)
        self.accepted += other.accepted
        self.rejections += other.rejections
        self.draft_tokens += other.draft_tokens
        self.rounds += other.rounds
        self.draft_s += other.draft_s
        self.verify_s += other.verify_s
        if _RANK[other.estimator] > _RANK[self.estimator]:
            self.estimator = other.estimator

    @property
    def alpha(self) -> float | None:
        judged = self.accepted + self.rejections
        return self.accepted / judged if judged else None


def _num(attrs: dict, key: str) -> float:
    value = attrs.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One speculation round as the trace has it; k = 0 when the trace does not say."""

    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    k: int = 0
    tree_depth: int = 0  # a draft tree's depth (then `drafted` counts its nodes)

    @property
    def chain(self) -> int:
        """The tokens the round drafted as the cost model counts them: a tree as a chain of its
        depth (the k controller's view too), else its draft."""
        return self.tree_depth or self.drafted


def rounds_of(tree: SpanTree, gen: SpanRecord) -> list[RoundRecord]:
    """The speculation rounds of a generation, from events or fine-detail child spans."""
    rounds = [
        RoundRecord(int(e.get(sc.ROUND_DRAFTED) or 0), int(e.get(sc.ROUND_ACCEPTED) or 0),
                    float(e.get(sc.ROUND_DRAFT_S) or 0.0), float(e.get(sc.ROUND_VERIFY_S) or 0.0),
                    int(e.get(sc.ROUND_K) or 0), int(e.get(sc.ROUND_TREE_DEPTH) or 0))
        for e in gen.events
        if e.name == sc.EVENT_SPECULATE_ROUND
    ]
    if rounds:
        return rounds
    drafts: list[SpanRecord] = []
    verifies: list[SpanRecord] = []
    for c in tree.kids(gen):
        if c.segment == sc.Segment.DRAFT:
            drafts.append(c)
        elif c.segment == sc.Segment.VERIFY:
            verifies.append(c)
    return [RoundRecord(int(d.attributes.get(sc.SPEC_DRAFTED) or 0), int(v.attributes.get(sc.SPEC_ACCEPTED) or 0),
                        d.duration_ns / NS, v.duration_ns / NS, tree_depth=int(v.attributes.get(sc.SPEC_TREE_DEPTH) or 0))
            for d, v in zip(drafts, verifies, strict=False)]


def _round_stats(rounds: list[RoundRecord], k: int, output_tokens: int) -> RoundStats:
    """The cost model's view of one generation. The rounds that drafted nothing are not recorded;
    they are the output tokens that neither the prefill nor a round produced (each is one plain
    step), so they include the plain steps after a fallback and at the token budget's end."""
    stats = RoundStats()
    asked: dict[int, int] = {}
    for r in rounds:
        if r.drafted <= 0:
            continue
        asked_k = r.k or k
        stats.add_round(r.chain, r.accepted, r.draft_s, r.verify_s, asked_k)
        asked[asked_k] = asked.get(asked_k, 0) + 1
    produced = 1 + sum(1 + r.accepted for r in rounds if r.drafted > 0)  # the prefill's token, then rounds
    common_k = max(asked, key=asked.__getitem__) if asked else max(k, 1)
    for _ in range(max(0, output_tokens - produced)):
        stats.add_no_draft(common_k)
    return stats


def totals(a: dict) -> AcceptanceStats:
    """What a generation's own attributes say of its speculation (its rounds then add to it)."""
    return AcceptanceStats(draft_tokens=int(_num(a, sc.SPEC_DRAFT_TOKENS)), rounds=int(_num(a, sc.SPEC_ROUNDS)),
                           draft_s=_num(a, sc.SPEC_DRAFT_S), verify_s=_num(a, sc.SPEC_VERIFY_S))


def acceptance_stats(tree: SpanTree, gen: SpanRecord, rounds: list[RoundRecord] | None = None) -> AcceptanceStats:
    """What this generation tells about alpha and the draft / verify costs. `rounds`: its rounds
    when the caller knows them (the columnar engine passes [] for a generation it has none of),
    else rounds_of(tree, gen)."""
    a = gen.attributes
    stats = totals(a)
    if rounds is None:
        rounds = rounds_of(tree, gen)
    k = int(_num(a, sc.SPEC_NUM_SPECULATIVE_TOKENS))
    if rounds:
        stats.accepted = sum(r.accepted for r in rounds)
        stats.rejections = sum(1 for r in rounds if 0 < r.drafted and r.accepted < r.chain)
        stats.draft_tokens = stats.draft_tokens or sum(r.drafted for r in rounds)
        stats.rounds = stats.rounds or len(rounds)
        stats.cost = _round_stats(rounds, k, int(_num(a, sc.GEN_AI_USAGE_OUTPUT_TOKENS)))
        return stats
    if stats.rounds and stats.verify_s > 0:  # only totals: every pass taken at the mean width
        stats.cost.widths[round(1 + stats.draft_tokens / stats.rounds)] = [float(stats.rounds), stats.verify_s]
        stats.cost.drafted, stats.cost.draft_s = float(stats.draft_tokens), stats.draft_s
    stats.accepted = int(_num(a, sc.SPEC_ACCEPTED_TOKENS))
    positions = a.get(sc.SPEC_ACCEPTANCE_PER_POSITION)
    if isinstance(positions, list) and k and len(positions) >= k and stats.rounds:
        stats.rejections = max(0, stats.rounds - int(positions[k - 1]))
        stats.estimator = ESTIMATOR_POSITIONS
    else:
        stats.rejections = max(0, stats.draft_tokens - stats.accepted)
        stats.estimator = ESTIMATOR_RATIO
    return stats


def server_side(tree: SpanTree, gen: SpanRecord) -> SpanRecord:
    """The model server's own span of a remote generation (a SERVER generation under the
    caller's, joined through `traceparent`), else the generation itself."""
    for c in tree.kids(gen):
        if c.segment == sc.Segment.GENERATION and c.kind == "SERVER":
            return c
    return gen


# Every attribute of a generation span that generation_figures and acceptance_stats read (the
# columnar engine brings back only these): keep it in step with them.
GENERATION_KEYS = (
    sc.SPEC_PREFILL_S, sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.SPEC_ROUNDS, sc.SPEC_DRAFT_TOKENS,
    sc.SPEC_ACCEPTED_TOKENS, sc.SPEC_FALLBACK, sc.SPEC_FALLBACK_REASON, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL,
    sc.SPEC_METHOD, sc.SPEC_NUM_SPECULATIVE_TOKENS, sc.SPEC_DRAFT_S, sc.SPEC_VERIFY_S, sc.SPEC_POLICY,
    sc.SPEC_ACCEPTANCE_PER_POSITION, sc.CONSTRAIN_ENGINE, sc.CONSTRAIN_MASK_S, sc.CONSTRAIN_COMPILE_S,
    sc.CONSTRAIN_DRAFTS_CUT, sc.CONSTRAIN_FALLBACK, sc.BATCH_SIZE, sc.ROOFLINE_PHASE, sc.ROOFLINE_PASSES,
    sc.ROOFLINE_ROWS, sc.ROOFLINE_FLOPS, sc.ROOFLINE_BYTES, sc.ROOFLINE_SECONDS, sc.ROOFLINE_PEAK_FLOP_S,
    sc.ROOFLINE_PEAK_BYTES_S, sc.ROOFLINE_DEVICE,
)


def generation_figures(tree: SpanTree, gen: SpanRecord, step: int, attempt: int, task_start: int,
                       served: SpanRecord | None = None) -> GenerationFigures:
    """The figures of one generation span (SPANS.md, `agenttrace.spec.*`). `served`: the model
    server's span of the same call, whose prefill and speculation figures are the call's."""
    a = gen.attributes
    wall = gen.duration_ns / NS
    served = served or gen
    if served is not gen:  # the caller's span knows the request; the server's how it was served
        a = {**served.attributes, **{k: v for k, v in a.items() if not k.startswith("agenttrace.spec.")}}
    prefill = _num(a, sc.SPEC_PREFILL_S)
    prefills = [c for c in tree.kids(served) if c.segment == sc.Segment.PREFILL]
    if not prefill:
        prefill = sum(c.duration_ns for c in prefills) / NS
    # Decode time per token needs the prefill's end; a call that records no prefill (a remote
    # server seen from the client, another instrumentation) gives none rather than a guess.
    knows_prefill = sc.SPEC_PREFILL_S in a or bool(prefills)
    out_tokens = int(_num(a, sc.GEN_AI_USAGE_OUTPUT_TOKENS))
    rounds = int(_num(a, sc.SPEC_ROUNDS))
    drafted = int(_num(a, sc.SPEC_DRAFT_TOKENS))
    accepted = int(_num(a, sc.SPEC_ACCEPTED_TOKENS))
    return lean(GenerationFigures(
        step=step,
        attempt=attempt,
        start_s=(gen.start_ns - task_start) / NS,
        wall_s=wall,
        **text_figures(a, _model(gen.attributes)),
        num_speculative_tokens=int(_num(a, sc.SPEC_NUM_SPECULATIVE_TOKENS)),
        input_tokens=int(_num(a, sc.GEN_AI_USAGE_INPUT_TOKENS)),
        output_tokens=out_tokens,
        prefill_s=prefill,
        draft_s=_num(a, sc.SPEC_DRAFT_S),
        verify_s=_num(a, sc.SPEC_VERIFY_S),
        rounds=rounds,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted else None,
        mean_acceptance_length=1.0 + accepted / rounds if rounds else None,
        tokens_per_s=out_tokens / wall if wall > 0 else None,
        decode_s_per_token=max(0.0, wall - prefill) / out_tokens if out_tokens and knows_prefill else None,
        fallback=bool(a.get(sc.SPEC_FALLBACK)),
        constrain_s=_num(a, sc.CONSTRAIN_MASK_S) + _num(a, sc.CONSTRAIN_COMPILE_S),
        drafts_cut=int(_num(a, sc.CONSTRAIN_DRAFTS_CUT)),
        batch_size=float(a[sc.BATCH_SIZE]) if isinstance(a.get(sc.BATCH_SIZE), (int, float)) else None,
        roofline=_roofline(a),
        roofline_peaks=_peaks(a),
    ))


def text_figures(a: dict, model: str | None = None) -> dict[str, str | None]:
    """A generation's figures that are its attributes as text (`model`: the caller's own span's,
    which comes before the attributes' where the server's are merged in)."""
    reason = a.get(sc.SPEC_FALLBACK_REASON)
    return {"model": model or _model(a), "method": str(a.get(sc.SPEC_METHOD) or "none"),
            "fallback_reason": str(reason) if reason is not None else None,
            "constrain_engine": str(a[sc.CONSTRAIN_ENGINE]) if sc.CONSTRAIN_ENGINE in a else None,
            "constrain_fallback": str(a[sc.CONSTRAIN_FALLBACK]) if sc.CONSTRAIN_FALLBACK in a else None,
            "spec_policy": str(a[sc.SPEC_POLICY]) if sc.SPEC_POLICY in a else None}


def peaks_device(a: dict) -> str:
    """The device the roofline's peaks were measured on, as _peaks names it."""
    return str(a.get(sc.ROOFLINE_DEVICE, ""))


def _roofline(a: dict) -> list[RooflinePhase]:
    """The agenttrace.roofline.* arrays, one entry per phase; nothing when absent or ragged (a
    foreign or truncated span: the report leaves it out rather than guess)."""
    keys = (sc.ROOFLINE_PHASE, sc.ROOFLINE_PASSES, sc.ROOFLINE_ROWS, sc.ROOFLINE_FLOPS, sc.ROOFLINE_BYTES,
            sc.ROOFLINE_SECONDS)
    cols = [a.get(k) for k in keys]
    if not all(isinstance(c, (list, tuple)) for c in cols) or len({len(c) for c in cols}) != 1:  # type: ignore[arg-type]
        return []
    try:
        return [RooflinePhase(str(p), int(n), int(r), float(f), float(b), float(t))
                for p, n, r, f, b, t in zip(*cols)]  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return []


def _peaks(a: dict) -> tuple[float, float, str] | None:
    flop_s, bytes_s = a.get(sc.ROOFLINE_PEAK_FLOP_S), a.get(sc.ROOFLINE_PEAK_BYTES_S)
    if isinstance(flop_s, (int, float)) and isinstance(bytes_s, (int, float)) and bytes_s > 0:
        return float(flop_s), float(bytes_s), peaks_device(a)
    return None


def _model(a: dict) -> str | None:
    model = a.get(sc.GEN_AI_REQUEST_MODEL) or a.get(sc.GEN_AI_RESPONSE_MODEL)
    return str(model) if model is not None else None


class SpecSums:
    """Speculation and throughput totals, generation by generation (in slots: a run adds millions)."""

    __slots__ = (
        "accepted",
        "draft",
        "drafted",
        "fallbacks",
        "k",
        "methods",
        "n",
        "out",
        "prefill",
        "rounds",
        "verify",
        "wall",
    )

    def __init__(self) -> None:
        self.n = self.out = self.rounds = self.drafted = self.accepted = self.fallbacks = self.k = 0
        self.wall = self.draft = self.verify = self.prefill = 0.0
        self.methods: set[str] = set()

    def add(self, g: GenerationFigures) -> None:
        self.n += 1
        self.out += g.output_tokens
        self.wall += g.wall_s
        self.rounds += g.rounds
        self.drafted += g.draft_tokens
        self.accepted += g.accepted_tokens
        self.fallbacks += g.fallback
        self.draft += g.draft_s
        self.verify += g.verify_s
        self.prefill += g.prefill_s
        self.k = max(self.k, g.num_speculative_tokens)
        self.methods.add(g.method)

    def figures(self) -> SpecFigures:
        return lean(SpecFigures(
            methods=sorted(self.methods), generations=self.n, output_tokens=self.out, generation_s=self.wall,
            rounds=self.rounds, draft_tokens=self.drafted, accepted_tokens=self.accepted, fallbacks=self.fallbacks,
            draft_s=self.draft, verify_s=self.verify, prefill_s=self.prefill, num_speculative_tokens=self.k,
        ))


def aggregate(gens: Iterable[GenerationFigures]) -> SpecFigures:
    """Speculation and throughput totals over generations."""
    sums = SpecSums()
    for g in gens:
        sums.add(g)
    return sums.figures()
