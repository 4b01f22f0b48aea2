"""Prefix reuse across calls: identical outputs, bounded memory, cached tokens reported."""

from __future__ import annotations

import gc
import weakref

import pytest

from agenttrace import CancelToken, FakeClock, GenerationCancelled, GenerationParams
from agenttrace.generation import kv, loop
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.prefix_cache import PrefixCache

P = GenerationParams(max_tokens=12)


def run(model, prompt, cache=None, drafter=None, k=0, cancel=None):
    return generate(model, prompt, P, StopCriteria(frozenset({2}), P.max_tokens), FakeClock(),
                    prefix_cache=cache, drafter=drafter, num_speculative_tokens=k, cancel=cancel)


def agent_like_prompts(first_output: list[int]) -> list[list[int]]:
    system = list(range(10, 40))  # the shared system prompt, tool schemas and examples
    step1 = system + [41, 42, 43]
    return [
        step1,
        step1 + first_output + [44, 45],  # the next step: history grows
        step1 + [46, 47],  # a retry: the same prompt plus feedback
        system + [50, 51, 52, 53],  # another task, same system prompt
    ]


@pytest.mark.parametrize("drafter", [None, PromptLookupDrafter()])
def test_outputs_are_identical_with_and_without_the_prefix_cache(tiny_model, drafter):
    first = run(tiny_model, agent_like_prompts([])[0]).tokens
    prompts = agent_like_prompts(first)
    cache = PrefixCache()
    cached = []
    for prompt in prompts:
        with_cache = run(tiny_model, prompt, cache, drafter, k=3)
        without = run(tiny_model, prompt, None, drafter, k=3)
        assert with_cache.tokens == without.tokens
        cached.append(with_cache.cached_tokens)
    # nothing cached at first; then the whole shared prefix is reused each time
    assert cached[0] == 0
    assert cached[1] >= len(prompts[0]) + len(first) - 1
    assert cached[2] == len(prompts[0])
    assert cached[3] == 30
    assert cache.hits == 3


def test_memory_is_bounded_and_old_entries_are_evicted(tiny_model):
    per_token = 2 * 2 * 2 * 8 * 4  # layers * (k, v) * kv heads * head dim * fp32 bytes
    cache = PrefixCache(max_bytes=60 * per_token)
    run(tiny_model, list(range(3, 43)), cache)  # 40 prompt tokens + output: one entry of ~50 tokens
    assert len(cache) == 1 and cache.nbytes <= cache.max_bytes
    run(tiny_model, list(range(50, 62)), cache)  # a different prompt: the older entry is evicted
    assert len(cache) == 1 and cache.nbytes <= cache.max_bytes
    assert run(tiny_model, list(range(3, 43)), cache).cached_tokens == 0  # it is gone
    prompt = list(range(3, 23))
    run(tiny_model, prompt, cache)
    run(tiny_model, prompt + [60], cache)
    assert len(cache) <= 2  # an entry that is a prefix of a newer one is dropped


def test_tensors_are_the_stored_keys_and_values_and_count_its_bytes(tiny_model):
    cache = PrefixCache()
    assert cache.tensors() == []
    run(tiny_model, list(range(3, 23)), cache)
    run(tiny_model, list(range(50, 62)), cache)  # two entries, no common prefix
    held = cache.tensors()
    assert len(held) == 2 * 2 * 2  # entries * layers * (keys, values)
    assert sum(t.nbytes for t in held) == cache.nbytes
    again = cache.tensors()
    assert all(a is b for a, b in zip(held, again, strict=True))  # the stored tensors, not copies
    cache.clear()
    assert cache.tensors() == []


def test_cancellation_stops_within_a_round_and_releases_the_caches(tiny_model, monkeypatch):
    made = []
    real_new_cache = kv.new_cache

    def tracking_new_cache(model, tokens=0):
        cache = real_new_cache(model, tokens)
        made.append(weakref.ref(cache))
        return cache

    monkeypatch.setattr(loop.kv, "new_cache", tracking_new_cache)
    cancel = CancelToken()
    rounds = []

    class CancelAfterTwo(PromptLookupDrafter):
        def propose(self, context, k, params):
            rounds.append(len(context))
            if len(rounds) == 2:
                cancel.cancel()
            return super().propose(context, k, params)

    cache = PrefixCache()
    with pytest.raises(GenerationCancelled) as err:
        generate(tiny_model, [5, 6, 7, 8, 5, 6, 7, 8, 5, 6], GenerationParams(max_tokens=40),
                 StopCriteria(frozenset(), 40), FakeClock(), drafter=CancelAfterTwo(), num_speculative_tokens=3,
                 prefix_cache=cache, cancel=cancel)
    assert len(rounds) == 2  # stopped right after the round in which it was cancelled
    assert len(cache) == 0  # a cancelled call leaves nothing behind
    gc.collect()
    assert made and all(ref() is None for ref in made), "the KV cache outlived the cancelled call"
    assert err.value is not None  # the exception (and its traceback) is still alive here


@pytest.mark.model
def test_agent_steps_reuse_the_prefix_and_give_identical_outputs(bundled):
    from agenttrace.examples.agents.function_calling import build_agent, tool_call_tasks
    from agenttrace import LocalChatModel, Telemetry

    tasks = tool_call_tasks()[:2]
    texts = {}
    cached = {}
    for use_cache in (False, True):
        model = LocalChatModel(bundled.model, bundled.tokenizer, name=bundled.name, drafter=PromptLookupDrafter(),
                               num_speculative_tokens=3, prefix_cache=use_cache)
        agent = build_agent(model, Telemetry())
        results = [agent.run(t) for t in tasks]
        texts[use_cache] = [a.text for r in results for s in r.steps for a in s.attempts]
        cached[use_cache] = [g.cached_input_tokens for r in results for g in r.generations]
    assert texts[True] == texts[False]
    assert all(c == 0 for c in cached[False])
    assert cached[True][0] == 0 and all(c > 300 for c in cached[True][1:])


def test_asyncio_cancellation_of_a_local_chat_model_stops_it_within_a_round(tiny_model, monkeypatch):
    import asyncio
    import threading

    from agenttrace import Message
    from agenttrace.generation.local import LocalChatModel

    class Tokenizer:  # just enough of a tokenizer for LocalChatModel
        eos_token_id = 2

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "x"

        def __call__(self, text, add_special_tokens):
            return {"input_ids": [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]}

        def decode(self, ids, skip_special_tokens):
            return " ".join(map(str, ids))

    started, rounds = threading.Event(), []

    class Slow(PromptLookupDrafter):
        def propose(self, context, k, params):
            rounds.append(1)
            started.set()
            threading.Event().wait(0.05)  # a slow round
            return super().propose(context, k, params)

    model = LocalChatModel(tiny_model, Tokenizer(), drafter=Slow(min_ngram=1), num_speculative_tokens=2,
                           prefix_cache=True, clock=FakeClock())

    async def main():
        task = asyncio.create_task(model.achat([Message("user", "hi")], GenerationParams(max_tokens=400)))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    done = len(rounds)
    threading.Event().wait(0.2)
    assert len(rounds) == done and done < 10  # nothing runs after the cancel took effect
    assert len(model.prefix_cache) == 0


def test_a_speculative_call_leaves_the_cache_plain_decoding_would(tiny_model):
    """A last round that verified the stop token and tokens beyond it must not leave their KV
    entries: the next call would reuse one more position than after plain decoding and prefill a
    different suffix (on the bf16 and quantized variants that changes the bits: issue 18)."""
    from agenttrace.generation.drafters import Draft

    prompt = list(range(10, 30))
    reference = run(tiny_model, prompt).tokens  # the plain continuation, 12 tokens

    class Oracle:
        """Drafts the plain continuation itself: every draft is accepted, past the stop too."""

        method = "oracle"

        def propose(self, context, k, params):
            done = len(context) - len(prompt)
            return Draft(reference[done : done + k])

        def reset(self):
            pass

    stop = StopCriteria(frozenset({2, reference[4]}), P.max_tokens)  # the 5th token ends the reply
    plain_cache, spec_cache = PrefixCache(), PrefixCache()
    plain = generate(tiny_model, prompt, P, stop, FakeClock(), prefix_cache=plain_cache)
    spec = generate(tiny_model, prompt, P, stop, FakeClock(), prefix_cache=spec_cache, drafter=Oracle(),
                    num_speculative_tokens=8)
    assert spec.tokens == plain.tokens == reference[: reference.index(reference[4]) + 1]
    assert spec.rounds and spec.rounds[-1].accepted > len(spec.tokens) - 1  # it verified past the stop
    assert [e.tokens for e in spec_cache._entries] == [e.tokens for e in plain_cache._entries]
    assert spec_cache.nbytes == plain_cache.nbytes
