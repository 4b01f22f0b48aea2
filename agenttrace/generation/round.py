"""One decode round, shared by the single-sequence loop (loop.py) and a request in the batch
(batching/sequence.py); the two differ only in how the target's pass runs (a forward of its own,
or a share of the batch's packed one).

A round: draft up to k tokens (`draft_round`), score the pending token and the draft in one
target pass (`pass_inputs`: a chain, or a tree's nodes at their depths), keep the verified prefix
plus the target's own next token with the cache, the features and the grammar rolled back to it
(`accept`), and account for it (`record`); `finished` then says whether the output ends there.
Without a draft (none asked for, none proposed, or one the grammar refused whole) a round is one
plain step through the same functions.

With a grammar every sampled position is masked first: the first token, each plain step, and
every position of a verify pass. A drafted token the grammar refuses ends the draft there before
verification (when that cannot change the output distribution: greedy, or a deterministic drafter;
a sampling drafter's refused token is left to rejection, which refuses it for certain and draws the
correction from the masked residual). After a rejection the matcher rolls back to the accepted
prefix; generation ends when the grammar is complete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from agenttrace.clock import Clock
from agenttrace.core.chat import GenerationParams, SpecRound
from agenttrace.errors import GenerationCancelled, GrammarDeadEnd
from agenttrace.generation import kv, sampling
from agenttrace.generation.adaptive import KController
from agenttrace.generation.constrain import Matcher, apply_mask_
from agenttrace.generation.drafters import Draft, Drafter
from agenttrace.generation.features import FeatureLog
from agenttrace.generation.prefix_cache import Hit, PrefixCache
from agenttrace.generation.tree import TreeDraft, tree_inputs, verify_tree_greedy, verify_tree_sampled
from agenttrace.generation.verify import verify_greedy, verify_sampled

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

__all__ = [
    "PLAIN", "Round", "StopCriteria", "accept", "cancelled", "constrain_draft", "dead_end", "draft_round",
    "feature_log", "finished", "first_stop", "fit_vocab", "hand_back", "open_cache", "pass_inputs", "propose",
    "record", "sample_into", "stream",
]

# The bench's fault scenario counts drafter failures by this logger's name.
_log = logging.getLogger("agenttrace.generation.loop")


@dataclass(frozen=True)
class StopCriteria:
    """When generation ends. `decode` turns token ids into text (for stop strings)."""

    eos_ids: frozenset[int]
    max_tokens: int
    stop_strings: tuple[str, ...] = ()
    decode: Callable[[Sequence[int]], str] | None = None


class Round(NamedTuple):
    """A round's draft as its pass will verify it. kind: "tree", "chain", or "step" (nothing to
    verify; `draft` is still set when the drafter was asked and proposed nothing). masks: the
    grammar's masks of the pass's rows; consumed: the drafted tokens the matcher took."""

    kind: str = "step"
    k: int = 0
    draft: Draft | TreeDraft | None = None
    masks: torch.Tensor | None = None
    consumed: int = 0
    draft_start: int = 0
    draft_end: int = 0


PLAIN = Round()
_UNASKED = (PLAIN, None)  # a plain step allocates nothing for its round


# -- the end ---------------------------------------------------------------------------------
def first_stop(tokens: list[int], checked: int, stop: StopCriteria) -> tuple[int, str] | None:
    """Where the output must end, looking at tokens from index `checked` on.

    Returns (length to keep, finish reason). EOS is kept in the token list (it was generated);
    for a stop string the kept tokens are the shortest prefix whose text contains it, so plain
    and speculative decoding cut the same token stream at the same place.
    """
    for i in range(checked, len(tokens)):
        if tokens[i] in stop.eos_ids:
            return i + 1, "stop"
        if i + 1 >= stop.max_tokens:
            cut = (i + 1, "length")
            break
    else:
        cut = None
    if stop.stop_strings and stop.decode is not None:
        end = cut[0] if cut else len(tokens)
        for n in range(max(checked, 1), end + 1):
            text = stop.decode(tokens[:n])
            if any(s in text for s in stop.stop_strings):
                return n, "stop"
    return cut


def finished(tokens: list[int], checked: int, stop: StopCriteria, matcher: Matcher | None) -> tuple[int, str] | None:
    """`first_stop`, and the end of a complete grammar (nothing more can follow)."""
    result = first_stop(tokens, checked, stop)
    if result is None and matcher is not None and matcher.stopped:
        return len(tokens), "stop"
    return result


def dead_end(matcher: Matcher, exc: GrammarDeadEnd, out: list[int]) -> tuple[int, str]:
    """The result when no token is allowed before the grammar is complete: the output ends where it
    is, recorded on the matcher's stats, and the caller decides what that means."""
    matcher.dead_end = str(exc)
    return len(out), "stop"


def cancelled(out: list[int]) -> GenerationCancelled:
    return GenerationCancelled(f"generation cancelled after {len(out)} tokens")


def stream(on_tokens: Callable[[list[int]], None] | None, out: list[int], result: tuple[int, str] | None) -> None:
    """Hand the caller every token so far, cut at the stop once one is found (a round may have
    verified tokens past it)."""
    if on_tokens is not None:
        on_tokens(list(out[: result[0]] if result else out))


# -- the cache -------------------------------------------------------------------------------
def open_cache(model: PreTrainedModel, prompt_ids: list[int], room: int, prefix_cache: PrefixCache | None,
               features: bool) -> tuple[Hit | None, Cache, int]:
    """(prefix cache hit, KV cache, prompt tokens it already holds). room: what a static
    (compiled) cache must hold."""
    if prefix_cache is not None:
        hit = prefix_cache.take(model, prompt_ids, room, features=features)
        return hit, hit.cache, hit.length
    return None, kv.new_cache(model, room), 0


def feature_log(hit: Hit | None, hidden: torch.Tensor, room: int) -> FeatureLog:
    """The prompt's features: the prefix cache's, then those the prefill computed."""
    first = hidden if hit is None or hit.features is None else torch.cat([hit.features.to(hidden.dtype), hidden])
    return FeatureLog(first, room)


def hand_back(prefix_cache: PrefixCache, prompt_ids: list[int], out: list[int], keep: int, cache: Cache,
              feats: FeatureLog | None) -> None:
    """Give the prefix cache what plain decoding's cache would hold, prompt + out[:keep - 1]: a last
    round may have verified tokens past the stop (a drafted EOS and beyond). Otherwise the next
    call would reuse one more position here than without speculation and prefill a different
    suffix, and a variant whose prefill and decode kernels differ would then diverge."""
    kept = len(prompt_ids) + max(keep - 1, 0)
    kv.crop(cache, kept)
    prefix_cache.put(prompt_ids + out[:keep], cache, feats.view()[:kept].clone() if feats is not None else None)


# -- before the pass -------------------------------------------------------------------------
def propose(drafter: Drafter, context: list[int], k: int, params: GenerationParams,
            features: FeatureLog | None = None) -> tuple[Draft | TreeDraft | None, str | None]:
    """The drafter's draft of at most k tokens, or (None, why) when it failed."""
    try:
        if features is not None:
            draft = drafter.propose(context, k, params, features=features.view())  # type: ignore[call-arg]
        else:
            draft = drafter.propose(context, k, params)
        if isinstance(draft, TreeDraft):
            return draft, None
    except Exception as exc:  # a broken drafter must not cost the answer: decode plainly instead
        _log.warning("drafter %s failed, decoding without it: %r", drafter.method, exc)
        return None, f"drafter_error: {type(exc).__name__}"
    return Draft(draft.tokens[:k], draft.probs[:k] if draft.probs is not None else None), None


def constrain_draft(matcher: Matcher, draft: Draft, params: GenerationParams) -> tuple[Draft, torch.Tensor, int]:
    """The draft to verify, the grammar masks of its verify positions, and how many drafted
    tokens the matcher consumed. A refused token ends the draft when cutting it cannot change
    the output distribution: greedy (a refused token never is the masked argmax) or a
    deterministic drafter (its one-hot q leaves the residual equal to the masked p). A sampling
    drafter's draft stays whole: cutting it where q put mass on refused tokens would bias the
    next token, while rejection refuses that token for certain and corrects from the residual."""
    masks, consumed, must_cut = matcher.masks_along(draft.tokens)
    assert masks is not None
    n = len(draft.tokens)
    if consumed < n and (must_cut or params.greedy or draft.probs is None):
        matcher.drafts_cut += n - consumed
        probs = draft.probs[:consumed] if draft.probs is not None else None
        return Draft(draft.tokens[:consumed], probs), masks[: consumed + 1], consumed
    return draft, masks, consumed


def draft_round(drafter: Drafter | None, prompt_ids: list[int], out: list[int], k: int, params: GenerationParams,
                grammar: Matcher | None, clock: Clock, features: FeatureLog | None) -> tuple[Round, str | None]:
    """The round for a draft of at most k tokens (k <= 0: a plain step, the drafter not asked),
    and why to stop drafting when the drafter failed. grammar: the matcher when it constrains."""
    if k <= 0:
        return _UNASKED
    start = clock.now_ns()
    draft, failed = propose(drafter, prompt_ids + out, k, params, features)  # type: ignore[arg-type]
    end = clock.now_ns()
    if isinstance(draft, TreeDraft):
        if grammar is None and len(draft):
            return Round("tree", k, draft, None, 0, start, end), failed
        draft = Draft(draft.chain())  # the grammar's masks follow one path: the best
    masks, consumed = None, 0
    if grammar is not None and draft is not None and draft.tokens:
        draft, masks, consumed = constrain_draft(grammar, draft, params)
    kind = "chain" if draft is not None and draft.tokens else "step"
    return Round(kind, k, draft, masks, consumed, start, end), failed


def pass_inputs(rnd: Round, pending: int, base: int) -> tuple[list[int], torch.Tensor | None, torch.Tensor | None]:
    """(ids, positions, visible) of the round's pass after the `base` tokens the cache holds (as
    kv.forward_features takes them; None: the next positions, causally)."""
    if rnd.kind == "tree":
        return tree_inputs(rnd.draft, pending, base)  # type: ignore[arg-type]
    if rnd.kind == "chain":
        return [pending, *rnd.draft.tokens], None, None  # type: ignore[union-attr]
    return [pending], None, None


# -- after the pass --------------------------------------------------------------------------
def sample_into(out: list[int], row: torch.Tensor, params: GenerationParams, rng: torch.Generator | None,
                grammar: Matcher | None, mask: torch.Tensor | None = None) -> None:
    """Append the token drawn from logits `row` [V] under the grammar (`mask`: its mask here, when
    a refused draft already computed it)."""
    if mask is not None:
        apply_mask_(row, mask)
    elif grammar is not None:
        grammar.mask_(row)
    out.append(sampling.choose(row, params, rng))
    if grammar is not None:
        grammar.advance(out[-1])


def accept(rnd: Round, logits: torch.Tensor, hidden: torch.Tensor | None, out: list[int], base: int, cache: Cache,
           feats: FeatureLog | None, grammar: Matcher | None, params: GenerationParams, rng: torch.Generator | None,
           verify: Callable = verify_sampled) -> int:
    """Extend `out` by what the target accepts of the round's pass (logits [n+1, V] of its rows,
    their features `hidden` when computed) and its own next token; the cache, the features and the
    grammar follow. Returns how many drafted tokens were accepted. verify: the sampled chain's
    acceptance rule (a test swaps in a broken one to see the distribution tests catch it)."""
    if rnd.kind == "tree":
        return _accept_tree(rnd.draft, logits, hidden, out, base, cache, feats, params, rng)  # type: ignore[arg-type]
    if rnd.kind == "step":
        if feats is not None and hidden is not None:
            feats.add(hidden)
        # a draft the grammar refused whole: its first mask is this one
        sample_into(out, logits[-1], params, rng, grammar, rnd.masks[0] if rnd.masks is not None else None)
        return 0
    draft = rnd.draft
    if rnd.masks is not None:
        apply_mask_(logits, rnd.masks)
    if params.greedy:
        accepted, nxt = verify_greedy(draft.tokens, logits)
    else:
        q = fit_vocab(draft.probs.to(logits.device), logits.shape[-1]) if draft.probs is not None else None
        accepted, nxt = verify(draft.tokens, q, sampling.probabilities(logits, params), rng)
    kv.crop(cache, base + 1 + accepted)
    if feats is not None and hidden is not None:  # the pending token's and the accepted drafts' features
        feats.add(hidden[: accepted + 1])
    out += draft.tokens[:accepted]
    if grammar is None:
        out.append(nxt)
    elif accepted <= rnd.consumed:  # (more: a drafted EOS was accepted, the output ends there)
        grammar.rollback(rnd.consumed - accepted)
        if not grammar.stopped:  # a complete grammar takes no more tokens: plain decoding stops here too
            out.append(nxt)
            grammar.advance(nxt)
    return accepted


def _accept_tree(tree: TreeDraft, logits: torch.Tensor, hidden: torch.Tensor | None, out: list[int], base: int,
                 cache: Cache, feats: FeatureLog | None, params: GenerationParams, rng) -> int:
    """The tree's accepted path, kept in the cache (and the features) as a chain's would be."""
    if params.greedy:
        path, nxt = verify_tree_greedy(tree, logits)
    else:
        path, nxt = verify_tree_sampled(tree, sampling.probabilities(logits, params), rng)
    rows = [node + 1 for node in path]
    kv.keep_path(cache, base, rows)
    if feats is not None and hidden is not None:
        feats.add(hidden[[0, *rows]])
    out += [tree.tokens[node] for node in path]
    out.append(nxt)
    return len(path)


def fit_vocab(q: torch.Tensor, vocab: int) -> torch.Tensor:
    """A drafter's q over the target's vocabulary (draft heads are sometimes padded differently;
    tokens outside the target's vocabulary get no mass, which rejection then corrects)."""
    if q.shape[-1] == vocab:
        return q
    if q.shape[-1] > vocab:
        q = q[..., :vocab]
        return q / q.sum(-1, keepdim=True).clamp_min(1e-30)
    return torch.nn.functional.pad(q, (0, vocab - q.shape[-1]))


def record(rnd: Round, accepted: int, start_ns: int, end_ns: int, rounds: list[SpecRound],
           controller: KController | None, plain_step: bool = True) -> None:
    """Account for a round whose pass ran from start_ns to end_ns. A verified draft is a SpecRound
    and a round of the controller's cost model, which sees a tree as a chain of its depth (k is
    the depth it asks for). A step where the drafter was asked and found nothing is a round of the
    cost model too; any other step (`plain_step`) is what speculation is measured against."""
    draft = rnd.draft
    if rnd.kind == "step":
        if controller is not None and draft is not None:
            controller.record_no_draft(rnd.k, (end_ns - start_ns) / 1e9)
        elif controller is not None and plain_step:
            controller.record_plain_step((end_ns - start_ns) / 1e9)
        return
    if isinstance(draft, TreeDraft):
        drafted = draft.depth
        spec = SpecRound(rnd.draft_start, rnd.draft_end, start_ns, end_ns, len(draft), accepted, rnd.k,
                         tree_depth=drafted)
    else:
        drafted = len(draft.tokens)  # type: ignore[union-attr]
        spec = SpecRound(rnd.draft_start, rnd.draft_end, start_ns, end_ns, drafted, accepted, rnd.k)
    rounds.append(spec)
    if controller is not None:
        controller.record_round(drafted, accepted, spec.draft_s, spec.verify_s, rnd.k)
