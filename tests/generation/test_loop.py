"""The generation loop: plain and speculative decoding over a real KV cache."""

from __future__ import annotations

import pytest
import torch

from agenttrace import (
    CancelToken,
    FakeClock,
    GenerationCancelled,
    GenerationParams,
    Message,
)
from agenttrace.generation.drafters import (
    Draft,
    PromptLookupDrafter,
    longest_suffix_match,
    prompt_lookup,
)
from agenttrace.generation.loop import StopCriteria, generate

GREEDY = GenerationParams(max_tokens=40)


def tiny_prompts() -> list[list[int]]:
    # Repetitive prompts, as tool-call prompts are: prompt lookup finds matches and is sometimes right.
    return [
        [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6],
        [10, 11, 12, 13, 10, 11, 12, 14, 10, 11],
        [3, 4, 3, 4, 3, 4, 3],
        list(range(20, 50)) + list(range(20, 30)),
        [40, 41, 42, 43, 44, 45, 40, 41, 42],
    ]


def run(model, prompt, params=GREEDY, drafter=None, k=0, stop=None, cancel=None):
    stop = stop or StopCriteria(frozenset({2}), params.max_tokens)
    return generate(model, prompt, params, stop, FakeClock(), drafter=drafter, num_speculative_tokens=k, cancel=cancel)


def test_prompt_lookup_copies_what_followed_the_longest_latest_match():
    ctx = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 1, 2, 3]
    assert prompt_lookup(ctx, k=2) == [7, 8]  # the most recent "1 2 3" is followed by 7 8
    assert prompt_lookup(ctx, k=5) == [7, 8, 4, 1, 2]
    assert prompt_lookup(ctx, k=10, tokens_per_match=1) == [7, 8, 4]  # a 3-token match drafts 3
    assert longest_suffix_match(ctx, 8) == (3, 8)
    # the longer match wins over a more recent shorter one
    assert prompt_lookup([5, 6, 7, 1, 0, 7, 2, 5, 6, 7], k=1) == [1]
    assert prompt_lookup([1, 2, 3, 4], k=3) == []  # nothing repeats
    assert prompt_lookup([5, 6, 5], k=3) == []  # a 1-token match is too weak by default
    assert prompt_lookup([5, 6, 5], k=3, min_ngram=1) == [6, 5]
    assert prompt_lookup([5], k=3) == []
    with pytest.raises(ValueError):
        PromptLookupDrafter(max_ngram=1, min_ngram=2)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_speculative_greedy_is_identical_to_plain_greedy_on_a_tiny_model(tiny_model, k):
    accepted = rejected = 0
    for prompt in tiny_prompts():
        plain = run(tiny_model, prompt)
        spec = run(tiny_model, prompt, drafter=PromptLookupDrafter(), k=k)
        assert spec.tokens == plain.tokens
        assert spec.finish_reason == plain.finish_reason
        accepted += sum(r.accepted for r in spec.rounds)
        rejected += sum(r.drafted - r.accepted for r in spec.rounds)
        # fewer target forward passes than tokens whenever anything was accepted
        assert spec.forward_passes <= plain.forward_passes
    # Both paths of verification were exercised, so the equality above means something.
    assert accepted > 0 and rejected > 0


def test_stops_on_eos_stop_string_and_max_tokens(tiny_model):
    prompt = tiny_prompts()[0]
    free = run(tiny_model, prompt, GenerationParams(max_tokens=30))
    assert free.finish_reason == "length" and len(free.tokens) == 30

    # EOS: make the model's 5th greedy token the EOS id.
    eos = free.tokens[4]
    stopped = run(tiny_model, prompt, stop=StopCriteria(frozenset({eos}), 30))
    assert stopped.finish_reason == "stop" and stopped.tokens == free.tokens[: free.tokens.index(eos) + 1]

    # A stop string over a toy detokenizer: cut at the shortest prefix whose text contains it.
    decode = lambda ids: " ".join(map(str, ids))  # noqa: E731
    target = decode(free.tokens[6:8])
    for drafter, k in ((None, 0), (PromptLookupDrafter(), 4)):
        out = run(tiny_model, prompt, drafter=drafter, k=k, stop=StopCriteria(frozenset(), 30, (target,), decode))
        assert out.finish_reason == "stop"
        assert target in decode(out.tokens) and target not in decode(out.tokens[:-1])


def test_seeded_sampling_is_reproducible_and_differs_across_seeds(tiny_model):
    prompt = tiny_prompts()[1]
    p = GenerationParams(max_tokens=20, temperature=1.0, top_p=0.9, seed=7)
    a, b = run(tiny_model, prompt, p), run(tiny_model, prompt, p)
    assert a.tokens == b.tokens
    others = {tuple(run(tiny_model, prompt, GenerationParams(max_tokens=20, temperature=1.0, seed=s)).tokens) for s in range(5)}
    assert len(others) > 1
    spec = run(tiny_model, prompt, p, drafter=PromptLookupDrafter(), k=3)
    assert len(spec.tokens) == 20  # sampling with a drafter runs (its distribution is tested in the generator issue)


def test_cancellation_stops_between_rounds(tiny_model):
    cancel = CancelToken()

    class CancelAfterFirst(PromptLookupDrafter):
        def propose(self, context, k, params):
            cancel.cancel()
            return super().propose(context, k, params)

    with pytest.raises(GenerationCancelled):
        run(tiny_model, tiny_prompts()[0], drafter=CancelAfterFirst(), k=3, cancel=cancel)


def test_a_failing_drafter_falls_back_to_plain_decoding(tiny_model):
    class Broken:
        method = "prompt_lookup"

        def propose(self, context, k, params) -> Draft:
            raise RuntimeError("drafter crashed")

        def reset(self) -> None:
            pass

    prompt = tiny_prompts()[0]
    out = run(tiny_model, prompt, drafter=Broken(), k=3)
    assert out.tokens == run(tiny_model, prompt).tokens
    assert out.fallback_reason == "drafter_error: RuntimeError"


def test_timings_are_ordered_on_the_clock(tiny_model):
    out = run(tiny_model, tiny_prompts()[0], drafter=PromptLookupDrafter(), k=3)
    assert out.start_ns <= out.prefill_start_ns <= out.prefill_end_ns <= out.end_ns
    for r in out.rounds:
        assert r.draft_start_ns <= r.draft_end_ns <= r.verify_start_ns <= r.verify_end_ns


BUNDLED_PROMPTS = [
    "What's the weather in Paris?",
    "Convert 10 km to miles.",
    "Write a JSON object with the keys name and city for Alice from Berlin.",
    "List three colours.",
    "Search my files for the budget.",
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox",
]


@pytest.mark.model
def test_speculative_greedy_matches_plain_greedy_on_the_bundled_model(bundled):
    from agenttrace import LocalChatModel, PromptLookupDrafter

    plain = LocalChatModel(bundled.model, bundled.tokenizer, name=bundled.name)
    spec = LocalChatModel(bundled.model, bundled.tokenizer, name=bundled.name, drafter=PromptLookupDrafter(), num_speculative_tokens=4)
    accepted = 0
    params = GenerationParams(max_tokens=32)
    for text in BUNDLED_PROMPTS:
        ids = plain.encode_chat([Message("system", 'Reply with JSON like {"tool": "weather", "arguments": {"city": "Rome"}}.'), Message("user", text)])
        _, a = plain.complete_ids(ids, params)
        gen, b = spec.complete_ids(ids, params)
        assert a.tokens == b.tokens, text
        accepted += sum(r.accepted for r in gen.rounds)
    assert accepted > 0


@pytest.mark.model
def test_local_chat_model_reports_a_complete_generation(bundled):
    from agenttrace import LocalChatModel, PromptLookupDrafter

    model = LocalChatModel(bundled.model, bundled.tokenizer, name=bundled.name, drafter=PromptLookupDrafter(), num_speculative_tokens=3)
    gen = model.chat([Message("user", "Say hello.")], GenerationParams(max_tokens=8))
    assert gen.text and gen.output_tokens <= 8 and gen.input_tokens > 5
    assert gen.method == "prompt_lookup" and gen.num_speculative_tokens == 3
    assert gen.start_ns <= gen.prefill_start_ns < gen.prefill_end_ns <= gen.first_token_ns <= gen.end_ns
    assert gen.finish_reason in ("stop", "length")
    assert torch.is_grad_enabled()  # the loop's inference mode does not leak out


def test_after_a_not_paying_generation_the_next_ones_decode_plainly_until_the_probe(tiny_model):
    from agenttrace.generation.adaptive import KController

    clock = FakeClock()

    class Costly:  # a slow drafter (1 ms a token on the fake clock) that is never right
        method = "draft_model"

        def propose(self, context, k, params) -> Draft:
            clock.advance(1_000_000 * k)
            return Draft(tokens=[(context[-1] + 1) % 64] * k)

        def reset(self) -> None:
            pass

    prompt = tiny_prompts()[0]
    controller = KController(4, warmup_rounds=3, probe_every=4)
    outs = [
        generate(tiny_model, prompt, GREEDY, StopCriteria(frozenset(), 24), clock, drafter=Costly(),
                 num_speculative_tokens=4, controller=controller)
        for _ in range(5)
    ]
    assert [len(o.rounds) > 0 for o in outs] == [True, False, False, False, True]  # the fifth probes again
    assert all(o.fallback_reason and o.fallback_reason.startswith("not_paying") for o in outs)
    assert "earlier generation" in outs[1].fallback_reason
    assert len({tuple(o.tokens) for o in outs}) == 1
    assert outs[0].tokens == run(tiny_model, prompt, params=GenerationParams(max_tokens=24),
                                 stop=StopCriteria(frozenset(), 24)).tokens
