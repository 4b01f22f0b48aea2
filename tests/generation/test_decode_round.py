"""The decode round's functions (generation/round.py), one behaviour each, on a tiny random model;
the loop's and the batch's tests run them end to end."""

from __future__ import annotations

import logging

import torch

from agenttrace import FakeClock, GenerationParams
from agenttrace.generation import kv
from agenttrace.generation.batching import sequence
from agenttrace.generation.drafters import Draft
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.round import PLAIN, Round, accept, draft_round, finished, hand_back, pass_inputs, record
from agenttrace.generation.tree import TreeDraft

GREEDY = GenerationParams()
PROMPT = [5, 6, 7, 8, 9, 5, 6]


class _Drafter:
    method = "test"

    def __init__(self, draft=None, error: Exception | None = None) -> None:
        self.draft, self.error, self.asked = draft, error, 0

    def propose(self, context, k, params):
        self.asked += 1
        if self.error is not None:
            raise self.error
        return self.draft

    def reset(self) -> None:
        pass


class _CountingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def now_ns(self) -> int:
        self.reads += 1
        return super().now_ns()


def test_a_round_allowed_no_draft_asks_nobody_and_reads_no_clock():
    drafter, clock = _Drafter(Draft([1, 2])), _CountingClock()
    rnd, failed = draft_round(drafter, PROMPT, [3], 0, GREEDY, None, clock, None)
    assert rnd is PLAIN and failed is None
    assert drafter.asked == 0 and clock.reads == 0


def test_a_failing_drafter_makes_a_plain_step_and_says_why_under_the_loops_logger(caplog):
    with caplog.at_level(logging.WARNING, logger="agenttrace.generation.loop"):
        rnd, failed = draft_round(_Drafter(error=RuntimeError("boom")), PROMPT, [3], 3, GREEDY, None, FakeClock(), None)
    assert rnd.kind == "step" and rnd.draft is None
    assert failed == "drafter_error: RuntimeError" and "boom" in caplog.text


def test_drafts_are_cut_to_k_and_an_empty_tree_is_a_step_that_asked():
    rnd, _ = draft_round(_Drafter(Draft([1, 2, 3, 4])), PROMPT, [3], 2, GREEDY, None, FakeClock(), None)
    assert rnd.kind == "chain" and rnd.draft.tokens == [1, 2] and rnd.k == 2
    empty = TreeDraft(tokens=[], parents=[], depths=[])
    rnd, _ = draft_round(_Drafter(empty), PROMPT, [3], 2, GREEDY, None, FakeClock(), None)
    assert rnd.kind == "step" and rnd.draft is not None and not rnd.draft.tokens


def test_a_chain_keeps_the_verified_prefix_and_the_targets_next_token(tiny_model):
    plain = generate(tiny_model, PROMPT, GREEDY, StopCriteria(frozenset(), 6), FakeClock()).tokens
    wrong = (plain[3] + 1) % 64
    rnd = Round("chain", 3, Draft([plain[1], plain[2], wrong]))
    out = plain[:1]  # the cache holds the prompt; out[-1] is pending
    with torch.inference_mode():
        cache = kv.new_cache(tiny_model)
        kv.prefill(tiny_model, PROMPT, cache)
        ids, positions, visible = pass_inputs(rnd, out[-1], len(PROMPT))
        assert ids == [plain[0], plain[1], plain[2], wrong] and positions is None and visible is None
        logits = kv.forward(tiny_model, ids, cache)
        accepted = accept(rnd, logits, None, out, len(PROMPT), cache, None, None, GREEDY, None)
    assert accepted == 2 and out == plain[:4]
    assert kv.cached_length(cache) == len(PROMPT) + 3  # prompt + out[:-1]: the rejected row is gone


class _Controller:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record_round(self, *args) -> None:
        self.calls.append(("round", *args))

    def record_no_draft(self, *args) -> None:
        self.calls.append(("no_draft", *args))

    def record_plain_step(self, *args) -> None:
        self.calls.append(("plain", *args))


def test_record_tells_verified_rounds_empty_drafts_and_plain_steps_apart():
    ctl, rounds = _Controller(), []
    record(Round("chain", 3, Draft([1, 2, 3]), None, 0, 10, 20), 2, 30, 50, rounds, ctl)
    tree = TreeDraft(tokens=[4, 5, 6], parents=[-1, -1, 0], depths=[1, 1, 2])
    record(Round("tree", 2, tree, None, 0, 60, 70), 2, 80, 100, rounds, ctl)
    record(Round("step", 3, Draft([])), 0, 0, 10, rounds, ctl)  # asked, found nothing
    record(PLAIN, 0, 0, 20, rounds, ctl)
    record(PLAIN, 0, 0, 30, rounds, ctl, plain_step=False)  # the batch's step while k > 0: not measured
    assert [(r.draft_start_ns, r.verify_end_ns, r.drafted, r.accepted, r.k, r.tree_depth) for r in rounds] == [
        (10, 50, 3, 2, 3, 0), (60, 100, 3, 2, 2, 2)]
    # a tree counts as a chain of its depth
    assert ctl.calls == [("round", 3, 2, 1e-8, 2e-8, 3), ("round", 2, 2, 1e-8, 2e-8, 2), ("no_draft", 3, 1e-8),
                         ("plain", 2e-8)]


def test_finished_cuts_at_eos_the_budget_or_the_shortest_prefix_holding_a_stop_string():
    stop = StopCriteria(frozenset({2}), 5, ("cd",), lambda ids: "".join(chr(96 + i) for i in ids))
    assert finished([1, 2, 3], 0, stop, None) == (2, "stop")
    assert finished([1, 3, 4, 5], 0, stop, None) == (3, "stop")  # "acd" holds "cd" at three tokens
    assert finished([1, 1, 1, 1, 1, 1], 0, stop, None) == (5, "length")
    assert finished([1, 1], 0, stop, None) is None


def test_hand_back_keeps_what_plain_decoding_would_have_cached(tiny_model):
    from agenttrace.generation.prefix_cache import PrefixCache

    out = [10, 11, 2, 12]  # a round verified one token past the EOS
    with torch.inference_mode():
        cache = kv.new_cache(tiny_model)
        kv.prefill(tiny_model, PROMPT + out[:-1], cache)
    pc = PrefixCache()
    hand_back(pc, PROMPT, out, 3, cache, None)
    assert kv.cached_length(cache) == len(PROMPT) + 2 and len(pc) == 1


def test_the_batch_runs_the_same_round_functions():
    import agenttrace.generation.round as rnd

    for name in ("accept", "draft_round", "finished", "hand_back", "record", "sample_into"):
        assert getattr(sequence, name) is getattr(rnd, name)
