"""The compiled decode path (generation/compiled.py): static cache, padded widths, identity of
compiled and eager passes, lossless speculation, the prefix cache, and what it refuses.

Each compiled width costs a few seconds of inductor time on a tiny model, so the tests share one
compiled view per variant and keep to widths 1, 2 and 4 (drafts of up to 3 tokens after a
prompt longer than a short pass, whose prefill runs eagerly)."""

from __future__ import annotations

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from agenttrace import FakeClock, GenerationParams
from agenttrace.generation import kv
from agenttrace.generation.compiled import MAX_WIDTH, StaticKV, capacity_for, compiled_view
from agenttrace.generation.draft_model import early_exit_drafter
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.prefix_cache import PrefixCache
from tests.generation.test_quantize import small, variant

# longer than a short pass (eager prefill), with repeats prompt lookup can draft from
PROMPTS = [list(range(20, 60)) + [20, 21, 22, 23], [3, 4, 5] * 12, list(range(10, 50))]
STOP = StopCriteria(frozenset({2}), 24)
_views: dict[str, tuple] = {}


def view(kind: str):
    """(model, compiled view) of the tiny model in `kind`, built once per session."""
    if kind not in _views:
        model = small() if kind == "fp32" else variant(kind)
        _views[kind] = (model, compiled_view(model))
    return _views[kind]


def test_capacities_are_powers_of_two_with_room_for_a_last_padded_pass():
    assert capacity_for(10) == 512
    assert capacity_for(500) == 1024  # 500 + 64 of slack
    assert capacity_for(1000) == 2048
    assert all(capacity_for(n) >= n + 2 * MAX_WIDTH for n in (1, 447, 448, 449, 5000))


@pytest.mark.parametrize("kind", ["int4", "bf16"])
def test_a_compiled_verify_pass_gives_each_position_the_bits_of_a_compiled_one_token_step(kind):
    _, comp = view(kind)
    prompt = PROMPTS[0]
    with torch.inference_mode():
        a, b = comp.new_cache(64), comp.new_cache(64)
        comp.forward(prompt[:-4], a)
        comp.forward(prompt[:-4], b)
        together = comp.forward(prompt[-4:], a)  # width 4
        alone = torch.cat([comp.forward([t], b) for t in prompt[-4:]])
        assert a.length() == b.length() == len(prompt)
    assert torch.equal(together, alone)


@pytest.mark.parametrize("kind", ["int4", "bf16"])
def test_compiled_passes_give_the_bits_of_the_same_passes_run_eagerly(kind):
    """Inductor rounds bf16 intermediates as eager does here: the graphs change the speed of a
    pass, not its result (on these CPUs and this torch; BENCHMARKS.md says what the bundled
    model measured)."""
    _, comp = view(kind)
    prompt = PROMPTS[1]
    with torch.inference_mode():
        compiled_cache, eager_cache = comp.new_cache(64), comp.new_cache(64)
        comp.forward(prompt, compiled_cache)
        comp.forward(prompt, eager_cache)
        compiled = comp.forward([7, 8, 9], compiled_cache)  # width 4, padded
        ids = torch.tensor([[7, 8, 9]])
        eager = comp.model(input_ids=ids, cache=eager_cache, use_cache=True).logits[0].float()
    assert torch.equal(compiled, eager)


def test_fp32_compiled_logits_match_the_eager_dynamic_cache_path_to_rounding():
    model, comp = view("fp32")
    with torch.inference_mode():
        eager = kv.forward(model, PROMPTS[2], kv.new_cache(model))
        compiled_cache = comp.new_cache(64)
        comp.forward(PROMPTS[2][:-3], compiled_cache)
        compiled = comp.forward(PROMPTS[2][-3:], compiled_cache)
    torch.testing.assert_close(compiled, eager[-3:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["fp32", "int4"])
def test_greedy_speculation_on_the_compiled_path_equals_its_plain_greedy(kind):
    model, comp = view(kind)
    for prompt in PROMPTS:
        plain = generate(comp, prompt, GenerationParams(), STOP, FakeClock())
        assert len(plain.tokens) == STOP.max_tokens or plain.finish_reason == "stop"
        for drafter in (PromptLookupDrafter(), early_exit_drafter(model, 1)):
            spec = generate(comp, prompt, GenerationParams(), STOP, FakeClock(), drafter=drafter,
                            num_speculative_tokens=3)
            assert spec.tokens == plain.tokens, (kind, prompt, type(drafter).__name__)
        if kind == "fp32":  # fp32 margins on this model are far above the kernels' rounding
            assert plain.tokens == generate(model, prompt, GenerationParams(), STOP, FakeClock()).tokens


def test_the_prefix_cache_works_on_static_caches_and_keeps_outputs():
    _, comp = view("int4")
    cache = PrefixCache()
    prompt = PROMPTS[0]
    first = generate(comp, prompt, GenerationParams(), STOP, FakeClock(), prefix_cache=cache)
    assert len(cache) == 1 and cache.nbytes < 64 * 2**10  # the used part, not the 512-token buffer
    again = generate(comp, prompt, GenerationParams(), STOP, FakeClock(), prefix_cache=cache)
    assert again.cached_tokens == len(prompt) - 1
    assert again.tokens == first.tokens


def test_a_prefix_cached_call_prefills_its_suffix_eagerly_compiling_nothing():
    """A suffix of 6 tokens would be an 8-wide pass: compiled, a graph no warm-up made, built
    inside the call (minutes on the bundled model)."""
    _, comp = view("int4")
    cache = PrefixCache()
    prompt = PROMPTS[0]
    generate(comp, prompt, GenerationParams(), STOP, FakeClock(), prefix_cache=cache)
    graphs = set(comp.compile_s)
    later = prompt[:-1] + [7, 8, 9, 10, 11, 12]
    again = generate(comp, later, GenerationParams(), STOP, FakeClock(), prefix_cache=cache)
    assert again.cached_tokens == len(prompt) - 1
    assert set(comp.compile_s) == graphs and again.tokens


def test_the_caller_model_keeps_its_attention_and_a_full_cache_says_so():
    model, comp = view("int4")
    assert comp.model is not model and comp.model.lm_head.packed.data_ptr() == model.lm_head.packed.data_ptr()  # shared tensors
    assert model.config._attn_implementation != comp.model.config._attn_implementation
    cache = StaticKV(comp.model, 512)
    with torch.inference_mode():
        comp.forward(list(range(3, 60)) * 8 + [5] * 50, cache)  # 506 tokens, eagerly
        with pytest.raises(ValueError, match="static cache of 512 tokens cannot take 8 more"):
            comp.forward([5] * 5, cache)


def test_a_sliding_window_model_is_refused_with_the_reason():
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=16)
    with pytest.raises(ValueError, match="full-attention layers"):
        compiled_view(MistralForCausalLM(config).eval())


def test_the_harness_arms_share_one_compiled_model_compiled_before_any_task():
    from types import SimpleNamespace

    from agenttrace.bench.harness.arms import COMPILED_CAPACITY, build_model
    from agenttrace.bench.harness.options import HarnessOptions

    model, _ = view("int4")
    loaded = SimpleNamespace(model=model, tokenizer=SimpleNamespace(eos_token_id=2), name="tiny")
    opts = HarnessOptions(compiled=True, prompt_lookup_k=1, prefix_cache_mb=0)
    base, lookup = build_model("baseline", loaded, opts), build_model("prompt_lookup", loaded, opts)
    assert base.compiled is lookup.compiled is not None
    assert set(base.compiled.compile_s) == {(COMPILED_CAPACITY, 1), (COMPILED_CAPACITY, 2)}  # k + 1 = 2 tokens
    eager = build_model("baseline", loaded, HarnessOptions(prefix_cache_mb=0))
    assert eager.compiled is None


def test_a_static_cache_made_in_inference_mode_can_be_cropped_after_it():
    """The loop crops for the prefix cache after its inference block; a static cache keeps its
    length in an inference tensor, which may change only in inference mode."""
    _, comp = view("int4")
    with torch.inference_mode():
        cache = comp.new_cache(64)
        comp.forward(PROMPTS[1], cache)
    kv.crop(cache, 30)
    assert cache.length() == 30
