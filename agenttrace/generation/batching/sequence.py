"""One request inside the batch: the generation loop's rounds (round.py), cut where the batch's
shared forward pass goes.

Per pass the engine asks each request for its segment (`plan_prefill`: the next chunk of its
prompt; `plan_decode`: its pending token and the draft its drafter proposed for the k the policy
allowed, a chain or a tree), runs them all in one pass, and hands each request its logits back
(`absorb`). What a request does with them is what `loop.generate` does with its own pass's, by
the same round functions, so a request in a batch keeps every behaviour a call alone has; only
the decision to stop speculating is the engine's policy's, not the request's controller's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agenttrace.clock import Clock
from agenttrace.core.chat import CancelToken, GenerationParams, SpecRound
from agenttrace.core.roofline import RooflineMeter
from agenttrace.errors import GrammarDeadEnd
from agenttrace.generation import sampling
from agenttrace.generation.adaptive import KController
from agenttrace.generation.batching.passes import Segment
from agenttrace.generation.constrain import Matcher
from agenttrace.generation.drafters import Drafter
from agenttrace.generation.features import FeatureLog
from agenttrace.generation.loop import Decoded
from agenttrace.generation.prefix_cache import PrefixCache
from agenttrace.generation.round import (
    PLAIN,
    Round,
    StopCriteria,
    accept,
    cancelled,
    dead_end,
    draft_round,
    feature_log,
    finished,
    hand_back,
    open_cache,
    pass_inputs,
    record,
    sample_into,
    stream,
)

__all__ = ["BatchStats", "Request", "Sequence"]


@dataclass
class Request:
    """What a caller hands the engine: `loop.generate`'s arguments."""

    prompt_ids: list[int]
    params: GenerationParams
    stop: StopCriteria
    drafter: Drafter | None = None
    num_speculative_tokens: int = 0
    controller: KController | None = None
    prefix_cache: PrefixCache | None = None
    cancel: CancelToken | None = None
    on_tokens: Callable[[list[int]], None] | None = None
    matcher: Matcher | None = None


@dataclass
class BatchStats:
    """What batching did for one generation (the `agenttrace.batch.*` and policy attributes)."""

    passes: int = 0  # passes this request took part in, prefill chunks included
    batch_size_sum: int = 0  # requests in those passes, summed
    max_batch_size: int = 0
    policy: str = ""  # how its k was chosen: "load_aware", "fixed" ("" without a drafter)
    reason: str = ""  # the policy's last reason for its k
    k_sum: int = 0  # k allowed, summed over decode passes
    k_zero: int = 0  # decode passes where the policy allowed no draft
    decode_passes: int = 0
    pass_s: float = 0.0  # seconds of the passes it took part in

    @property
    def mean_batch_size(self) -> float:
        return self.batch_size_sum / self.passes if self.passes else 0.0

    def add_pass(self, size: int, seconds: float) -> None:
        self.passes += 1
        self.batch_size_sum += size
        self.max_batch_size = max(self.max_batch_size, size)
        self.pass_s += seconds


@dataclass
class _Plan:
    kind: str  # "prefill", or the round's kind: "step", "chain", "tree"
    segment: Segment
    round: Round = PLAIN
    k: int = 0  # the k allowed (cut to the budget); the controller times a plain step only at 0
    final_chunk: bool = False


class Sequence:
    """A request's state between passes (see the module docstring)."""

    def __init__(self, req: Request, model, clock: Clock, chunk: int, meter: RooflineMeter | None, submitted_ns: int) -> None:
        self.req = req
        self.model = model
        self.clock = clock
        self.chunk = chunk
        self.meter = meter
        self.start_ns = submitted_ns
        self.stats = BatchStats()
        p = req.params
        self.rng = sampling.make_generator(p, model.device)
        self.speculating = req.drafter is not None and req.num_speculative_tokens > 0
        self.reads = self.speculating and getattr(req.drafter, "reads_features", False)
        self.constrained = req.matcher is not None and req.matcher.active
        self.grammar = req.matcher if self.constrained else None
        self.fallback: str | None = None
        if req.controller is not None and self.speculating:
            self.fallback = req.controller.start_generation()
        self.out: list[int] = []
        self.rounds: list[SpecRound] = []
        self.passes = 0
        self.result: tuple[int, str] | None = None
        self.prefill_start = self.prefill_end = self.first_token = 0
        self.hit = None
        self.cache = None
        self.cached = 0
        self.prefilled = 0  # prompt tokens in the cache
        self._hidden: list[torch.Tensor] = []
        self.feats: FeatureLog | None = None
        self.plan: _Plan | None = None
        self.done = False

    # -- lifecycle -------------------------------------------------------------------------
    def begin(self) -> None:
        """Take the prefix cache's hit (or a new cache): on the engine's thread, when its prefill
        is about to start (so it finds what requests prefilled before it offered)."""
        req = self.req
        room = len(req.prompt_ids) + req.stop.max_tokens
        self.hit, self.cache, self.cached = open_cache(self.model, req.prompt_ids, room, req.prefix_cache, self.reads)
        self.prefilled = self.cached

    @property
    def prefilling(self) -> bool:
        return self.prefilled < len(self.req.prompt_ids)

    @property
    def cancelled(self) -> bool:
        return self.req.cancel is not None and self.req.cancel.cancelled

    def release(self) -> None:
        """Drop the KV cache and features now (a request leaving without finishing)."""
        self.cache = self.hit = self.feats = None
        self._hidden = []
        self.plan = None
        if not self.done and self.req.drafter is not None:
            self.req.drafter.reset()

    # -- planning ----------------------------------------------------------------------------
    def plan_prefill(self, budget: int) -> Segment:
        ids = self.req.prompt_ids[self.prefilled : self.prefilled + max(1, min(budget, self.chunk))]
        final = self.prefilled + len(ids) == len(self.req.prompt_ids)
        if not self.prefill_start:
            self.prefill_start = self.clock.now_ns()
        seg = Segment(self.cache, list(ids), logit_rows=[len(ids) - 1] if final else [])
        self.plan = _Plan("prefill", seg, final_chunk=final)
        return seg

    def plan_decode(self, k: int) -> Segment:
        """The pending token and a draft of at most k tokens (0: a plain step)."""
        req, out = self.req, self.out
        rnd = PLAIN
        if self.speculating and self.fallback is None:
            k = min(k, req.stop.max_tokens - len(out) - 1)
            rnd, self.fallback = draft_round(req.drafter, req.prompt_ids, out, k, req.params, self.grammar, self.clock,
                                             self.feats)
        ids, positions, visible = pass_inputs(rnd, out[-1], len(req.prompt_ids) + len(out) - 1)
        self.plan = _Plan(rnd.kind, Segment(self.cache, ids, positions=positions, visible=visible), rnd, k)
        return self.plan.segment

    # -- after the pass ----------------------------------------------------------------------
    def absorb(self, logits: torch.Tensor, hidden: torch.Tensor | None, start_ns: int, end_ns: int) -> None:
        """Take this request's logits (and features) of the pass that ran from start_ns to end_ns."""
        plan, self.plan = self.plan, None
        assert plan is not None
        req, out = self.req, self.out
        try:
            if plan.kind == "prefill":
                self._after_prefill(plan, logits, hidden)
                return
            if self.cancelled:
                raise cancelled(out)
            checked = len(out)
            base = len(req.prompt_ids) + len(out) - 1
            rnd = plan.round
            accepted = accept(rnd, logits, hidden, out, base, self.cache, self.feats, self.grammar, req.params,
                              self.rng)
            # The pass's time is the batch's, so the controller's own fallback does not decide
            # here: the engine's policy does, knowing the batch.
            record(rnd, accepted, start_ns, end_ns, self.rounds, req.controller, plan.k == 0 and self.speculating)
            self.passes += 1
            self.result = finished(out, checked, req.stop, req.matcher)
        except GrammarDeadEnd as exc:
            if not out:
                self.first_token = self.clock.now_ns()
            self.result = dead_end(req.matcher, exc, out)  # type: ignore[arg-type]
        stream(req.on_tokens, out, self.result)

    def _after_prefill(self, plan: _Plan, logits: torch.Tensor, hidden: torch.Tensor | None) -> None:
        req = self.req
        self.prefilled += len(plan.segment.ids)
        if self.reads and hidden is not None:
            self._hidden.append(hidden)
        if not plan.final_chunk:
            return
        if self.reads:
            ours = torch.cat(self._hidden)
            self._hidden = []
            self.feats = feature_log(self.hit, ours, len(req.prompt_ids) + req.stop.max_tokens
                                     + req.num_speculative_tokens + 1)
        self.prefill_end = self.clock.now_ns()
        if req.prefix_cache is not None:
            # Offer the prompt now, not only when the call ends: a request whose prefill starts
            # after this one's (an agent beside it, the same system prompt) reuses it at once.
            # The entry keeps these tensors; the cache's next update makes new ones.
            feats = self.feats.view()[: len(req.prompt_ids)] if self.feats is not None else None
            req.prefix_cache.put(req.prompt_ids, self.cache, feats)
        try:
            sample_into(self.out, logits[-1], req.params, self.rng, self.grammar)
            self.first_token = self.clock.now_ns()
            if not self.constrained:
                self.prefill_end = self.first_token
            self.result = finished(self.out, 0, req.stop, req.matcher)
        except GrammarDeadEnd as exc:
            self.first_token = self.clock.now_ns()
            self.result = dead_end(req.matcher, exc, self.out)  # type: ignore[arg-type]
        stream(req.on_tokens, self.out, None)

    # -- the end -----------------------------------------------------------------------------
    def finish(self) -> Decoded:
        """The call's output, and the cache handed to the prefix cache as `loop.generate` does."""
        req = self.req
        keep, reason = self.result  # type: ignore[misc]
        if req.prefix_cache is not None and self.cache is not None:
            hand_back(req.prefix_cache, req.prompt_ids, self.out, keep, self.cache, self.feats)
        self.done = True
        decoded = Decoded(
            tokens=self.out[:keep], finish_reason=reason, start_ns=self.start_ns, prefill_start_ns=self.prefill_start,
            prefill_end_ns=self.prefill_end, first_token_ns=self.first_token, end_ns=self.clock.now_ns(),
            prompt_tokens=len(req.prompt_ids), cached_tokens=self.cached, rounds=self.rounds,
            fallback_reason=self.fallback, forward_passes=self.passes,
            constrain=req.matcher.stats() if req.matcher is not None else None,
        )
        self.release()
        return decoded
