"""One request inside the batch: the generation loop's steps (loop.py), cut where the batch's
shared forward pass goes.

Per pass the engine asks each request for its segment (`plan_prefill`: the next chunk of its
prompt; `plan_decode`: its pending token and the draft its drafter proposed for the k the policy
allowed, a chain or a tree), runs them all in one pass, and hands each request its logits back
(`absorb`). What a request does with them is what `loop.generate` does with its own pass's:
greedy or sampled verification, the grammar's masks and rollback, the cache cropped to the
accepted tokens, the features logged for a feature drafter, the stop criteria and streaming, so
a request in a batch keeps every behaviour a call alone has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agenttrace.clock import Clock
from agenttrace.core.chat import CancelToken, GenerationParams, SpecRound
from agenttrace.core.roofline import RooflineMeter
from agenttrace.errors import GenerationCancelled
from agenttrace.generation import kv, sampling
from agenttrace.generation.adaptive import KController
from agenttrace.generation.batching.passes import Segment
from agenttrace.generation.constrain import GrammarDeadEnd, Matcher, apply_mask_
from agenttrace.generation.drafters import Draft, Drafter
from agenttrace.generation.features import FeatureLog
from agenttrace.generation.loop import Decoded, StopCriteria, _constrain_draft, _finished, _fit_vocab, _propose
from agenttrace.generation.prefix_cache import PrefixCache
from agenttrace.generation.tree import TreeDraft, tree_inputs, verify_tree_greedy, verify_tree_sampled
from agenttrace.generation.verify import verify_greedy, verify_sampled

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
    kind: str  # "prefill", "step", "chain", "tree"
    segment: Segment
    draft: Draft | TreeDraft | None = None
    masks: torch.Tensor | None = None
    consumed: int = 0
    k: int = 0
    draft_start: int = 0
    draft_end: int = 0
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
        if req.prefix_cache is not None:
            self.hit = req.prefix_cache.take(self.model, req.prompt_ids, room, features=self.reads)
            self.cache, self.cached = self.hit.cache, self.hit.length
        else:
            self.cache, self.cached = kv.new_cache(self.model, room), 0
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
        draft = None
        plan = _Plan("step", Segment(self.cache, [out[-1]]), k=k)
        if self.speculating and self.fallback is None:
            k = min(k, req.stop.max_tokens - len(out) - 1)
            plan.k = k
            if k > 0:
                plan.draft_start = self.clock.now_ns()
                feats = self.feats
                draft, self.fallback = _propose(req.drafter, req.prompt_ids + out, k, req.params, feats)  # type: ignore[arg-type]
                plan.draft_end = self.clock.now_ns()
        if isinstance(draft, TreeDraft) and (self.constrained or not len(draft)):
            draft = Draft(draft.chain())  # the grammar's masks follow one path: the best
        if self.constrained and draft is not None and draft.tokens:
            draft, plan.masks, plan.consumed = _constrain_draft(req.matcher, draft, req.params)  # type: ignore[arg-type]
        plan.draft = draft
        base = len(req.prompt_ids) + len(out) - 1
        if isinstance(draft, TreeDraft):
            ids, positions, visible = tree_inputs(draft, out[-1], base)
            plan.kind, plan.segment = "tree", Segment(self.cache, list(ids), positions=positions, visible=visible)
        elif draft is not None and draft.tokens:
            plan.kind, plan.segment = "chain", Segment(self.cache, [out[-1], *draft.tokens])
        self.plan = plan
        return plan.segment

    # -- after the pass ----------------------------------------------------------------------
    def absorb(self, logits: torch.Tensor, hidden: torch.Tensor | None, start_ns: int, end_ns: int) -> None:
        """Take this request's logits (and features) of the pass that ran from start_ns to end_ns."""
        plan, self.plan = self.plan, None
        assert plan is not None
        req = self.req
        try:
            if plan.kind == "prefill":
                self._after_prefill(plan, logits, hidden)
                return
            if self.cancelled:
                raise GenerationCancelled(f"generation cancelled after {len(self.out)} tokens")
            checked = len(self.out)
            if plan.kind == "tree":
                self._after_tree(plan, logits, hidden, start_ns, end_ns)
            elif plan.kind == "chain":
                self._after_chain(plan, logits, hidden, start_ns, end_ns)
            else:
                self._after_step(plan, logits, hidden, (end_ns - start_ns) / 1e9)
            self.passes += 1
            self.result = _finished(self.out, checked, req.stop, req.matcher)
        except GrammarDeadEnd as exc:
            req.matcher.dead_end = str(exc)  # type: ignore[union-attr]
            if not self.out:
                self.first_token = self.clock.now_ns()
            self.result = (len(self.out), "stop")
        if req.on_tokens is not None:
            req.on_tokens(list(self.out[: self.result[0]] if self.result else self.out))

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
            first = ours if self.hit is None or self.hit.features is None else torch.cat([self.hit.features.to(ours.dtype), ours])
            self.feats = FeatureLog(first, len(req.prompt_ids) + req.stop.max_tokens + req.num_speculative_tokens + 1)
        self.prefill_end = self.clock.now_ns()
        if req.prefix_cache is not None:
            # Offer the prompt now, not only when the call ends: a request whose prefill starts
            # after this one's (an agent beside it, the same system prompt) reuses it at once.
            # The entry keeps these tensors; the cache's next update makes new ones.
            feats = self.feats.view()[: len(req.prompt_ids)] if self.feats is not None else None
            req.prefix_cache.put(req.prompt_ids, self.cache, feats)
        try:
            if self.constrained:
                req.matcher.mask_(logits[-1])  # type: ignore[union-attr]
            self.out.append(sampling.choose(logits[-1], req.params, self.rng))
            if self.constrained:
                req.matcher.advance(self.out[-1])  # type: ignore[union-attr]
            self.first_token = self.clock.now_ns()
            if not self.constrained:
                self.prefill_end = self.first_token
            self.result = _finished(self.out, 0, req.stop, req.matcher)
        except GrammarDeadEnd as exc:
            req.matcher.dead_end = str(exc)  # type: ignore[union-attr]
            self.first_token = self.clock.now_ns()
            self.result = (len(self.out), "stop")
        if req.on_tokens is not None:
            req.on_tokens(list(self.out))

    def _after_tree(self, plan: _Plan, logits, hidden, start_ns: int, end_ns: int) -> None:
        req, tree = self.req, plan.draft
        assert isinstance(tree, TreeDraft)
        base = len(req.prompt_ids) + len(self.out) - 1
        if req.params.greedy:
            path, nxt = verify_tree_greedy(tree, logits)
        else:
            path, nxt = verify_tree_sampled(tree, sampling.probabilities(logits, req.params), self.rng)
        rows = [node + 1 for node in path]
        kv.keep_path(self.cache, base, rows)
        if self.feats is not None and hidden is not None:
            self.feats.add(hidden[[0, *rows]])
        kept = [tree.tokens[node] for node in path]
        self.out += kept
        self.out.append(nxt)
        rnd = SpecRound(plan.draft_start, plan.draft_end, start_ns, end_ns, len(tree), len(kept), plan.k, tree_depth=tree.depth)
        self.rounds.append(rnd)
        self._record(tree.depth, len(kept), rnd, plan.k)

    def _after_chain(self, plan: _Plan, logits, hidden, start_ns: int, end_ns: int) -> None:
        req, draft = self.req, plan.draft
        assert draft is not None
        base = len(req.prompt_ids) + len(self.out) - 1
        n = len(draft.tokens)
        if plan.masks is not None:
            apply_mask_(logits, plan.masks)
        if req.params.greedy:
            accepted, nxt = verify_greedy(draft.tokens, logits)
        else:
            q = _fit_vocab(draft.probs.to(logits.device), logits.shape[-1]) if draft.probs is not None else None
            accepted, nxt = verify_sampled(draft.tokens, q, sampling.probabilities(logits, req.params), self.rng)
        kv.crop(self.cache, base + 1 + accepted)
        if self.feats is not None and hidden is not None:
            self.feats.add(hidden[: accepted + 1])
        self.out += draft.tokens[:accepted]
        if not self.constrained:
            self.out.append(nxt)
        elif accepted <= plan.consumed:
            req.matcher.rollback(plan.consumed - accepted)  # type: ignore[union-attr]
            if not req.matcher.stopped:  # type: ignore[union-attr]
                self.out.append(nxt)
                req.matcher.advance(nxt)  # type: ignore[union-attr]
        rnd = SpecRound(plan.draft_start, plan.draft_end, start_ns, end_ns, n, accepted, plan.k)
        self.rounds.append(rnd)
        self._record(n, accepted, rnd, plan.k)

    def _after_step(self, plan: _Plan, logits, hidden, step_s: float) -> None:
        req = self.req
        if self.feats is not None and hidden is not None:
            self.feats.add(hidden)
        if plan.masks is not None:  # a draft the grammar refused whole: its first mask is this one
            apply_mask_(logits[-1], plan.masks[0])
        elif self.constrained:
            req.matcher.mask_(logits[-1])  # type: ignore[union-attr]
        self.out.append(sampling.choose(logits[-1], req.params, self.rng))
        if self.constrained:
            req.matcher.advance(self.out[-1])  # type: ignore[union-attr]
        ctl = req.controller
        if ctl is not None and plan.draft is not None:
            ctl.record_no_draft(plan.k, step_s)
        elif ctl is not None and plan.k == 0 and self.speculating:
            ctl.record_plain_step(step_s)

    def _record(self, drafted: int, accepted: int, rnd: SpecRound, k: int) -> None:
        """Tell the request's controller (its acceptance estimates feed the policy). In a batch
        the pass's time is the batch's, so the controller's own fallback does not decide here:
        the engine's policy does, knowing the batch."""
        if self.req.controller is not None:
            self.req.controller.record_round(drafted, accepted, rnd.draft_s, rnd.verify_s, k)

    # -- the end -----------------------------------------------------------------------------
    def finish(self) -> Decoded:
        """The call's output, and the cache handed to the prefix cache as `loop.generate` does."""
        req = self.req
        keep, reason = self.result  # type: ignore[misc]
        if req.prefix_cache is not None and self.cache is not None:
            kept = len(req.prompt_ids) + max(keep - 1, 0)
            kv.crop(self.cache, kept)
            feats = self.feats.view()[:kept].clone() if self.feats is not None else None
            req.prefix_cache.put(req.prompt_ids + self.out[:keep], self.cache, feats)
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
