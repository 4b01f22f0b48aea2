"""Every drafter keeps greedy output token-identical to plain greedy decoding."""

from __future__ import annotations

import pytest
import torch
from test_loop import tiny_prompts
from transformers import LlamaConfig, LlamaForCausalLM

from agenttrace import FakeClock, GenerationParams, Message
from agenttrace.generation.draft_model import (
    DraftModelDrafter,
    early_exit_drafter,
    early_exit_view,
)
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.generation.loop import StopCriteria, generate

GREEDY = GenerationParams(max_tokens=40)


def small_draft_model(seed: int = 3) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


def run(model, prompt, drafter=None, k=0, params=GREEDY):
    return generate(model, prompt, params, StopCriteria(frozenset({2}), params.max_tokens), FakeClock(),
                    drafter=drafter, num_speculative_tokens=k)


def drafters_for(target):
    return {
        "prompt_lookup": PromptLookupDrafter(max_ngram=4, min_ngram=2),
        "draft_model": DraftModelDrafter(small_draft_model()),
        "self_draft": DraftModelDrafter(target),  # the target drafting for itself: everything accepted
        "early_exit": early_exit_drafter(target, 1),
    }


@pytest.mark.parametrize("name", ["prompt_lookup", "draft_model", "self_draft", "early_exit"])
def test_every_drafter_is_lossless_for_greedy_on_a_tiny_model(tiny_model, name):
    drafter = drafters_for(tiny_model)[name]
    rounds = []
    for prompt in tiny_prompts():
        plain = run(tiny_model, prompt)
        spec = run(tiny_model, prompt, drafter, k=4)
        assert spec.tokens == plain.tokens
        rounds += spec.rounds
    assert rounds, "the drafter proposed something"
    if name == "self_draft":
        assert all(r.accepted == r.drafted for r in rounds)


def test_the_draft_model_keeps_its_cache_in_step(tiny_model):
    drafter = DraftModelDrafter(small_draft_model())
    seen = []
    original = drafter.model.forward

    def counting_forward(*args, **kwargs):
        seen.append(kwargs["input_ids"].shape[1])
        return original(*args, **kwargs)

    drafter.model.forward = counting_forward  # count tokens fed; test-only instrumentation
    prompt = tiny_prompts()[3]
    run(tiny_model, prompt, drafter, k=3)
    # the context (prompt and the first token) is fed once; then only new tokens and draft steps
    assert seen[0] == len(prompt) + 1
    assert max(seen[1:]) <= 4
    before = len(seen)
    run(tiny_model, prompt, drafter, k=3)  # the same prompt again: its cache covers all but one token
    assert seen[before] == 1


def test_early_exit_view_shares_weights_and_leaves_the_target_whole(tiny_model):
    view = early_exit_view(tiny_model, 1)
    assert len(view.model.layers) == 1 and len(tiny_model.model.layers) == 2
    assert view.lm_head is tiny_model.lm_head and view.model.layers[0] is tiny_model.model.layers[0]
    assert tiny_model.config.num_hidden_layers == 2
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        assert not torch.allclose(view(ids).logits, tiny_model(ids).logits)
    with pytest.raises(ValueError, match="between 1 and 1"):
        early_exit_view(tiny_model, 2)


def test_sampling_drafters_return_q_for_rejection_sampling(tiny_model):
    drafter = DraftModelDrafter(small_draft_model())
    draft = drafter.propose([5, 6, 7], 3, GenerationParams(temperature=0.8, top_k=10, seed=1))
    assert len(draft.tokens) == 3 and draft.probs.shape == (3, 64)
    assert torch.allclose(draft.probs.sum(-1), torch.ones(3))
    assert all(draft.probs[i, t] > 0 for i, t in enumerate(draft.tokens))
    assert all((draft.probs[i] > 0).sum() <= 10 for i in range(3))  # top-k applied to q like p


@pytest.mark.model
def test_every_drafter_is_lossless_for_greedy_on_the_bundled_model(bundled):
    from agenttrace import LocalChatModel

    base = LocalChatModel(bundled.model, bundled.tokenizer, name=bundled.name)
    prompts = [
        [Message("system", 'Reply with JSON like {"tool": "weather", "arguments": {"city": "Rome"}}.'), Message("user", q)]
        for q in ("What's the weather in Oslo?", "Convert 5 km to miles.", "Tell me a short story about a fox.")
    ]
    params = GenerationParams(max_tokens=24)
    drafters = {
        "prompt_lookup": PromptLookupDrafter(),
        "early_exit": early_exit_drafter(bundled.model, 8),
        "draft_model": DraftModelDrafter(early_exit_view(bundled.model, 12)),
    }
    # plain greedy once per prompt (deterministic: the same tokens for every drafter to match)
    inputs = [base.encode_chat(messages) for messages in prompts]
    expected = [base.complete_ids(ids, params)[1].tokens for ids in inputs]
    for name, drafter in drafters.items():
        spec = LocalChatModel(bundled.model, bundled.tokenizer, drafter=drafter, num_speculative_tokens=4, fallback=False)
        for ids, tokens in zip(inputs, expected, strict=True):
            assert spec.complete_ids(ids, params)[1].tokens == tokens, name
