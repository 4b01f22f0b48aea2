"""Drafting from the target's features (generation/head_drafters.py) through the real loop:
greedy output identical to plain greedy (fp32 and int4, with the prefix cache), the sampled
distribution kept (with a negative control), the features handed over across calls, and the
head files (fp16, int8, another model's, a damaged one)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agenttrace import FakeClock, GenerationParams
from agenttrace.errors import ModelUnavailable
from agenttrace.generation.drafters import Draft
from agenttrace.generation.head_drafters import EagleDrafter, MedusaDrafter, bind_to
from agenttrace.generation.head_files import fingerprint, head_for, load_head, save_head
from agenttrace.generation.heads import HeadConfig, init_eagle
from agenttrace.generation.invariant import use_rowwise_attention
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.prefix_cache import PrefixCache
from agenttrace.generation.quantize import quantize_model
from agenttrace.training.fit import eagle_acceptance
from tests.generation import test_verify as tv
from tests.generation.test_quantize import small
from tests.tiny_heads import EOS

STOP = StopCriteria(frozenset({EOS}), 24)


def _prompts(heads, n=6):
    return [s.tokens[: s.prompt_len].tolist() for s in heads.train[:n]]


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_greedy_drafting_from_features_equals_plain_greedy(heads, kind):
    model = heads.model
    drafter = EagleDrafter(heads.eagle, model) if kind == "eagle" else MedusaDrafter(heads.medusa, model)
    cache = PrefixCache()
    accepted = 0
    for prompt in _prompts(heads):
        plain = generate(model, prompt, GenerationParams(), STOP, FakeClock())
        for pc in (None, cache, cache):  # the second call with the cache reuses the prompt and its features
            spec = generate(model, prompt, GenerationParams(), STOP, FakeClock(), drafter=drafter,
                            num_speculative_tokens=3, prefix_cache=pc)
            assert spec.tokens == plain.tokens
            accepted += sum(r.accepted for r in spec.rounds)
    assert accepted > {"eagle": 20, "medusa": 5}[kind]  # drafts were accepted: the accepted-path bookkeeping ran
    assert cache.hits >= 6


def test_greedy_eagle_is_lossless_on_the_int4_variant(heads):
    """int4 features are bf16; the verify pass's rows keep one-token steps' bits (row-wise
    attention), so speculative greedy equals plain greedy of the same int4 model."""
    model = small()
    quantize_model(model, "int4")
    assert use_rowwise_attention(model)
    head = init_eagle(heads.eagle.config, 0)
    head.load_state_dict(heads.eagle.state_dict())
    drafter = EagleDrafter(head, model)
    cache = PrefixCache()
    for prompt in _prompts(heads, 4):
        plain = generate(model, prompt, GenerationParams(), STOP, FakeClock())
        spec = generate(model, prompt, GenerationParams(), STOP, FakeClock(), drafter=drafter,
                        num_speculative_tokens=4, prefix_cache=cache)
        assert spec.tokens == plain.tokens


def test_the_prefix_cache_keeps_features_for_drafters_that_read_them(heads):
    model = heads.model
    prompt = _prompts(heads, 1)[0]
    cache = PrefixCache()
    generate(model, prompt, GenerationParams(), STOP, FakeClock(), prefix_cache=cache)  # plain: no features
    drafter = EagleDrafter(heads.eagle, model)
    first = generate(model, prompt, GenerationParams(), STOP, FakeClock(), drafter=drafter, num_speculative_tokens=3,
                     prefix_cache=cache)
    assert first.cached_tokens == 0  # the plain call's entry has no features: a feature drafter prefills all
    second = generate(model, prompt, GenerationParams(), STOP, FakeClock(), drafter=drafter,
                      num_speculative_tokens=3, prefix_cache=cache)
    assert second.cached_tokens == len(prompt) - 1
    hit = cache.take(model, prompt + first.tokens + [5], features=True)
    assert hit.features is not None and hit.features.shape == (hit.length, model.config.hidden_size)
    assert hit.length == len(prompt) + len(first.tokens) - 1
    # the features kept are the target's own at those positions
    from agenttrace.generation import kv
    with torch.inference_mode():
        _, fresh = kv.forward_features(model, (prompt + first.tokens)[: hit.length], kv.new_cache(model))
    torch.testing.assert_close(hit.features, fresh, atol=1e-4, rtol=1e-4)


class _LyingDrafter:
    """The negative control: drafts with the head's sampling but tells the loop q is uniform."""

    method = "eagle"
    reads_features = True

    def __init__(self, inner: EagleDrafter) -> None:
        self.inner = inner

    def propose(self, context, k, params, *, features):
        draft = self.inner.propose(context, k, params, features=features)
        if draft.probs is None:
            return draft
        return Draft(draft.tokens, torch.full_like(draft.probs, 1.0 / draft.probs.shape[-1]))

    def reset(self) -> None:
        self.inner.reset()


def _first_two(drafter, target, params: GenerationParams, samples: int) -> float:
    """p-value of the loop's first two sampled tokens against the target's exact joint."""
    exact2 = tv.exact_joint(tv.conditionals(target, params)).reshape(tv.V, tv.V, tv.V).sum(-1).ravel()
    codes = []
    for seed in range(samples):
        p = GenerationParams(temperature=params.temperature, top_k=params.top_k, seed=seed)
        # a budget of 4: after the first token a round drafts up to 2, so token 2 is verified
        out = generate(target, tv.PROMPT, p, StopCriteria(frozenset(), 4), FakeClock(), drafter=drafter,
                       num_speculative_tokens=3)
        assert out.rounds
        codes.append(out.tokens[0] * tv.V + out.tokens[1])
    counts = np.bincount(codes, minlength=tv.V * tv.V)
    exp = exact2 * len(codes)
    keep = exp >= 5
    stat = float((((counts - exp) ** 2)[keep] / exp[keep]).sum())
    df = int(keep.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _sampling_head(target):
    """An untrained head far from the target (so rejections happen) over 6 of its 8 tokens."""
    c = target.config
    head = init_eagle(HeadConfig("eagle", c.hidden_size, c.vocab_size, 6, 2, 1, 8, 32, 10000.0, 1e-5), 3)
    head.draft_ids = torch.tensor([0, 1, 2, 3, 5, 6])
    with torch.no_grad():
        for p in head.parameters():
            p.mul_(4.0)
    return EagleDrafter(head, target)


def test_sampled_eagle_drafting_keeps_the_target_distribution_and_a_lying_q_is_caught():
    target = tv.tiny(0)
    params = GenerationParams(temperature=1.0, top_k=6)
    assert _first_two(_sampling_head(target), target, params, 1500) > tv.P_MIN
    assert _first_two(_LyingDrafter(_sampling_head(target)), target, params, 1500) < 1e-6


def test_head_files_round_trip_fp16_and_int8_and_refuse_another_model(heads, tmp_path):
    model = heads.model
    target = fingerprint(model)
    size16 = save_head(heads.eagle, tmp_path / "h.safetensors", target, {"seed": 0})
    size8 = save_head(heads.eagle, tmp_path / "h8.safetensors", target, {"seed": 0}, int8=True)
    assert size8 < 0.7 * size16
    for name, tol in (("h.safetensors", 1e-2), ("h8.safetensors", 0.1)):
        loaded = load_head(tmp_path / name)
        assert loaded.target == target and loaded.recipe == {"seed": 0}
        assert torch.equal(loaded.head.draft_ids, heads.eagle.draft_ids)
        for (k, a), b in zip(heads.eagle.state_dict().items(), loaded.head.state_dict().values(), strict=True):
            if a.is_floating_point():
                assert (a - b).abs().max() <= tol * max(float(a.abs().max()), 1e-3), k
        bind_to(loaded.head, model)
        # the int8 head still guesses as the fp32 one does on most positions
        assert eagle_acceptance(loaded.head, heads.train, 1)[0] > 0.8 * eagle_acceptance(heads.eagle, heads.train, 1)[0]
    other = small(seed=5)
    with pytest.raises(ModelUnavailable, match="trained for another model.*train-drafter"):
        head_for("eagle", other, "tiny", path=tmp_path / "h.safetensors")
    assert head_for("eagle", model, "tiny", path=tmp_path / "h.safetensors").target == target
    (tmp_path / "bad.safetensors").write_bytes(b"not a head")
    with pytest.raises(ModelUnavailable, match="not a readable agenttrace head"):
        load_head(tmp_path / "bad.safetensors")
    with pytest.raises(ModelUnavailable, match="no medusa head for tiny.*train-drafter --kind medusa"):
        head_for("medusa", model, "tiny", path=tmp_path / "missing.safetensors")


def test_the_bench_and_harness_arms_find_a_head_trained_into_the_cache(heads, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from agenttrace.bench.generation_arms import build_arms
    from agenttrace.bench.harness.arms import build_model
    from agenttrace.bench.harness.options import HarnessOptions
    from agenttrace.generation.head_files import user_path
    from tests.bench.test_bench_generation import Tokenizer

    model = heads.model
    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path))
    loaded = SimpleNamespace(model=model, tokenizer=Tokenizer(), name="tiny")
    with pytest.raises(ModelUnavailable, match="no eagle head for tiny.*train-drafter --kind eagle"):
        build_arms(loaded, ["ours_eagle_tree"], FakeClock())
    for kind, head in (("eagle", heads.eagle), ("medusa", heads.medusa)):
        for int8 in (False, True):
            save_head(head, user_path(kind, "tiny", int8), fingerprint(model), {}, int8=int8)
    names = ["ours_plain", "ours_eagle_k4", "ours_eagle_tree", "ours_eagle_tree_int8", "ours_medusa_k3",
             "ours_lookup_eagle_tree"]
    arms = build_arms(loaded, names, FakeClock())
    prompt = _prompts(heads, 1)[0]
    runs = {name: arm(prompt, 16) for name, arm in arms.items()}
    assert all(r.tokens == runs["ours_plain"].tokens for r in runs.values())
    assert runs["ours_eagle_tree"].accepted > 0
    for arm, method in (("eagle", "eagle"), ("eagle_tree", "eagle"), ("medusa", "medusa"),
                        ("lookup_eagle", "prompt_lookup+eagle")):
        chat = build_model(arm, loaded, HarnessOptions(prefix_cache_mb=0))
        assert chat.method == method
    assert build_model("eagle_tree", loaded, HarnessOptions(prefix_cache_mb=0)).drafter.tree is not None
    assert build_model("eagle", loaded, HarnessOptions(prefix_cache_mb=0)).drafter.tree is None
    with pytest.raises(ValueError, match="without --compiled"):
        build_model("eagle", loaded, HarnessOptions(prefix_cache_mb=0, compiled=True))


def test_a_head_moves_to_the_device_of_the_target_it_drafts_for():
    # A target on another device (a GPU for users; the meta device here) gets its head there,
    # output rows included: a head left on the CPU would fail at its first draft.
    model = small(0).to("meta")
    head = init_eagle(HeadConfig("eagle", 64, 96, 16, 4, 2, 16, 128, 10000.0, 1e-5), 0)
    bind_to(head, model)
    assert {t.device.type for t in [*head.parameters(), *head.buffers(), head.out.weight]} == {"meta"}
