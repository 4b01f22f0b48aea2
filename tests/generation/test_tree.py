"""Draft trees (generation/tree.py) and EAGLE's tree drafting through the loop: the verify pass's
inputs, the greedy walk, the lossless sampled walk (the joint distribution of the first three
tokens, and a broken walk that must fail), the cache keeping only the accepted path, and greedy
output identical to plain greedy on fp32 and int4."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agenttrace import FakeClock, GenerationParams
from agenttrace.generation import kv
from agenttrace.generation.head_drafters import EagleDrafter, TreeShape
from agenttrace.generation.heads import init_eagle
from agenttrace.generation.invariant import use_rowwise_attention
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.prefix_cache import PrefixCache
from agenttrace.generation.quantize import quantize_model
from agenttrace.generation.tree import TreeDraft, tree_inputs, verify_tree_greedy, verify_tree_sampled
from tests.generation import test_verify as tv
from tests.generation.test_head_drafters import _first_two, _sampling_head
from tests.generation.test_quantize import small
from tests.tiny_heads import EOS

STOP = StopCriteria(frozenset({EOS}), 24)
# root -> 5 (-> 7, 8), 6 (-> 9); 7 -> 4
TREE = TreeDraft(tokens=[5, 6, 7, 8, 9, 4], parents=[-1, -1, 0, 0, 1, 2], depths=[1, 1, 2, 2, 2, 3])


def test_the_verify_pass_sees_context_ancestors_and_itself_at_depth_positions():
    ids, positions, visible = tree_inputs(TREE, pending=3, base=10)
    assert ids == [3, 5, 6, 7, 8, 9, 4]
    assert positions.tolist() == [10, 11, 11, 12, 12, 12, 13]
    assert visible.shape == (7, 17) and visible[:, :10].all()
    rows = {i: set((visible[i, 10:].nonzero()[:, 0]).tolist()) for i in range(7)}
    assert rows == {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 4}, 5: {0, 2, 5}, 6: {0, 1, 3, 6}}
    assert TREE.chain() == [5, 7, 4] and TREE.depth == 3


def test_the_greedy_walk_follows_the_targets_argmax_down_the_tree():
    logits = torch.zeros(7, 12)
    for row, best in enumerate([5, 8, 1, 2, 11, 0, 3]):  # per verify row, the target's argmax
        logits[row, best] = 1.0
    assert verify_tree_greedy(TREE, logits) == ([0, 3], 11)  # 5 then 8; after 8 the target says 11
    logits[0] = 0
    logits[0, 6] = 1.0
    logits[2] = 0
    logits[2, 9] = 1.0
    assert verify_tree_greedy(TREE, logits) == ([1, 4], 0)
    logits[0] = 0
    logits[0, 2] = 1.0
    assert verify_tree_greedy(TREE, logits) == ([], 2)


def _tree_for(q_tab, prefix: list[int]) -> TreeDraft:
    """A deterministic tree from the drafter's conditionals: its top 2 tokens, and under the
    best of them its top 2 again (q_tab as in test_verify, prefixes of up to 2 tokens)."""
    length = torch.tensor([len(prefix)])
    padded = torch.tensor([prefix + [0] * (3 - len(prefix))])
    q = q_tab[tv.code(padded, length), len(prefix)][0]
    top = q.topk(2).indices.tolist()
    if len(prefix) >= 2:
        return TreeDraft(top, [-1, -1], [1, 1])
    padded2 = torch.tensor([prefix + [top[0]] + [0] * (2 - len(prefix))])
    q2 = q_tab[tv.code(padded2, torch.tensor([len(prefix) + 1])), len(prefix) + 1][0]
    second = q2.topk(2).indices.tolist()
    return TreeDraft(top + second, [-1, -1, 0, 0], [1, 1, 2, 2])


def _sample_three(p_tab, q_tab, walk, samples: int, seed: int) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    codes = np.empty(samples, dtype=np.int64)
    for s in range(samples):
        out: list[int] = []
        while len(out) < 3:
            tree = _tree_for(q_tab, out)
            rows = [out]  # the prefix each verify row scores after: the root's, then each node's
            for i, parent in enumerate(tree.parents):
                rows.append((rows[parent + 1]) + [tree.tokens[i]])
            probs = torch.stack([p_tab[tv.code(torch.tensor([r[:3] + [0] * (3 - len(r[:3]))]),
                                               torch.tensor([min(len(r), 3)])), min(len(r), 3)][0] for r in rows])
            path, nxt = walk(tree, probs, gen)
            out += [tree.tokens[i] for i in path] + [nxt]
        codes[s] = out[0] * tv.V * tv.V + out[1] * tv.V + out[2]
    return codes


def _broken_walk(tree, probs, gen):
    """The classic mistake for trees: refuse a child, but keep testing the next against p itself
    (no residual), and fall back to p."""
    node, path = -1, []
    while True:
        p = probs[node + 1]
        accepted = None
        for child in tree.children(node):
            if float(torch.rand((), generator=gen)) < float(p[tree.tokens[child]]) * 2:
                accepted = child
                break
        if accepted is None:
            return path, int(torch.multinomial(p, 1, generator=gen))
        path.append(accepted)
        node = accepted


def test_sampled_tree_verification_keeps_the_target_distribution_and_a_broken_walk_fails():
    target, drafter = tv.tiny(0), tv.tiny(1)
    params = GenerationParams(temperature=1.0)
    p_tab, q_tab = tv.conditionals(target, params), tv.conditionals(drafter, params)
    expected = tv.exact_joint(p_tab)
    p_value, total_variation = tv.chi_square_p(_sample_three(p_tab, q_tab, verify_tree_sampled, 6000, 7), expected)
    assert p_value > tv.P_MIN and total_variation < 0.12  # (sampling noise over 512 cells alone is about 0.08)
    p_bad, _ = tv.chi_square_p(_sample_three(p_tab, q_tab, _broken_walk, 6000, 7), expected)
    assert p_bad < 1e-6


def test_after_a_tree_pass_the_cache_holds_the_accepted_path_as_a_chain_would():
    model = small()
    prompt = list(range(20, 40))
    with torch.inference_mode():
        cache = kv.new_cache(model)
        kv.forward(model, prompt[:-1], cache)
        ids, positions, visible = tree_inputs(TREE, prompt[-1], len(prompt) - 1)
        kv.forward_features(model, ids, cache, positions=positions, visible=visible)
        kv.keep_path(cache, len(prompt) - 1, [2, 5])  # nodes 1 (6) and 4 (9)
        chain = kv.new_cache(model)
        kv.forward(model, prompt + [6, 9], chain)
        assert kv.cached_length(cache) == kv.cached_length(chain) == len(prompt) + 2
        for a, b in zip(cache.layers, chain.layers, strict=True):
            torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["fp32", "int4"])
def test_greedy_tree_drafting_equals_plain_greedy(heads, kind):
    if kind == "fp32":
        model, head = heads.model, heads.eagle
    else:  # the int4 variant's tree rows gather their keys: each keeps a one-token step's bits
        model = small()
        quantize_model(model, "int4")
        assert use_rowwise_attention(model)
        head = init_eagle(heads.eagle.config, 0)
        head.load_state_dict(heads.eagle.state_dict())
    drafter = EagleDrafter(head, model, tree=TreeShape(depth=3, branch=3, expand=2, size=8))
    cache = PrefixCache()
    longer = 0
    for s in heads.train[:5]:
        prompt = s.tokens[: s.prompt_len].tolist()
        plain = generate(model, prompt, GenerationParams(), STOP, FakeClock())
        spec = generate(model, prompt, GenerationParams(), STOP, FakeClock(), drafter=drafter,
                        num_speculative_tokens=3, prefix_cache=cache)
        assert spec.tokens == plain.tokens
        assert all(r.tree_depth >= 1 and r.drafted >= r.tree_depth for r in spec.rounds)
        longer += sum(r.accepted >= 2 for r in spec.rounds)
    assert longer > 0  # paths deeper than one node were accepted


def test_sampled_tree_drafting_through_the_loop_keeps_the_target_distribution():
    target = tv.tiny(0)
    drafter = _sampling_head(target)
    drafter.tree = TreeShape(depth=2, branch=3, expand=2, size=6)
    assert _first_two(drafter, target, GenerationParams(temperature=1.0, top_k=6), 1500) > tv.P_MIN


def _wide_tree(nodes: int, seed: int) -> TreeDraft:
    gen = torch.Generator().manual_seed(seed)
    parents, depths = [], []
    for i in range(nodes):
        parent = int(torch.randint(-1, i, (1,), generator=gen)) if i else -1
        parents.append(parent)
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return TreeDraft(torch.randint(3, 96, (nodes,), generator=gen).tolist(), parents, depths)


def test_on_int4_each_tree_row_has_the_bits_of_a_one_token_step_at_its_place():
    """Row-wise attention gathers a tree row's keys (context, ancestors, itself): its logits are
    bit for bit those of plain decoding along its own path. (A 24-node tree: the stock masked
    attention over that many rows differs in the last bits.)"""
    tree = _wide_tree(24, 0)
    model = small()
    quantize_model(model, "int4")
    assert use_rowwise_attention(model)
    prompt = list(range(20, 60))
    with torch.inference_mode():
        cache = kv.new_cache(model)
        kv.forward(model, prompt[:-1], cache)
        ids, positions, visible = tree_inputs(tree, prompt[-1], len(prompt) - 1)
        tree_logits, _ = kv.forward_features(model, ids, cache, positions=positions, visible=visible)
        for node in range(len(tree)):
            path = [node]
            while tree.parents[path[-1]] >= 0:
                path.append(tree.parents[path[-1]])
            tokens = [prompt[-1]] + [tree.tokens[i] for i in reversed(path)]
            steps = kv.new_cache(model)
            kv.forward(model, prompt[:-1], steps)
            for t in tokens:
                last = kv.forward(model, [t], steps)
            assert torch.equal(tree_logits[node + 1], last[0]), node


def test_a_generation_with_tree_rounds_records_the_trees_on_its_span():
    from agenttrace.core.chat import Generation, SpecRound
    from agenttrace.telemetry.generation_attributes import generation_attributes

    rounds = (SpecRound(0, 1, 1, 2, 10, 3, 3, tree_depth=3), SpecRound(2, 3, 3, 4, 8, 1, 3, tree_depth=2))
    gen = Generation("x", 5, 7, "stop", 0, 10, 0, 1, 1, method="eagle", num_speculative_tokens=3, rounds=rounds)
    attrs = generation_attributes(gen)
    assert attrs["agenttrace.spec.tree.depth"] == 3 and attrs["agenttrace.spec.tree.nodes"] == 9.0
    assert attrs["agenttrace.spec.acceptance_per_position"] == (2, 1, 1)  # by depth, not by node
    assert attrs["agenttrace.spec.mean_acceptance_length"] == 3.0  # 1 + 4 accepted / 2 rounds
