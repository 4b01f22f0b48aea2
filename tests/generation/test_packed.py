"""Prepacked weights for verify passes: same model, same greedy output, original untouched."""

from __future__ import annotations

import pytest
import torch
from test_loop import tiny_prompts
from torch import nn

from agenttrace import FakeClock, GenerationParams
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.packed import PackedLinear, packed_view, packing_available


def test_the_view_shares_weights_and_leaves_the_model_alone(tiny_model):
    if not packing_available(tiny_model):
        pytest.skip("oneDNN linear ops are not available in this torch build")
    view = packed_view(tiny_model)
    assert isinstance(view.model.layers[0].mlp.down_proj, PackedLinear)
    assert type(tiny_model.model.layers[0].mlp.down_proj) is nn.Linear
    assert view.model.layers[0].mlp.down_proj.linear is tiny_model.model.layers[0].mlp.down_proj
    assert view.model.embed_tokens is tiny_model.model.embed_tokens
    ids = torch.arange(3, 15).unsqueeze(0)
    with torch.no_grad():
        for n in (1, 2, 5, 12):
            assert torch.allclose(view(ids[:, :n]).logits, tiny_model(ids[:, :n]).logits, atol=1e-5)


def test_speculative_greedy_through_packed_weights_equals_plain_greedy(tiny_model):
    view = packed_view(tiny_model)
    params = GenerationParams(max_tokens=40)
    stop = StopCriteria(frozenset({2}), 40)
    for prompt in tiny_prompts():
        plain = generate(tiny_model, prompt, params, stop, FakeClock())
        spec = generate(view, prompt, params, stop, FakeClock(), drafter=PromptLookupDrafter(min_ngram=1), num_speculative_tokens=6)
        assert spec.tokens == plain.tokens


def _one_row_kernel(runner) -> str:
    layer = runner.model.layers[0].mlp.down_proj
    return "packed" if isinstance(layer, PackedLinear) and layer.min_rows == 1 else "stock"


@pytest.mark.parametrize("capability", ["AVX512", "AVX512_BF16", "AVX2", "DEFAULT"])
def test_plain_steps_take_the_packed_weights_by_the_cpus_vector_width_not_by_timing(tiny_model, monkeypatch,
                                                                                  capability):
    if not packing_available(tiny_model):
        pytest.skip("oneDNN linear ops are not available in this torch build")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    layer = packed_view(tiny_model).model.layers[0].mlp.down_proj
    assert layer.min_rows == (1 if capability.startswith("AVX512") else 2)
    x = torch.randn(1, layer.linear.in_features)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer.linear(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("capability", ["AVX512", "AVX2"])
def test_every_arm_over_one_model_runs_its_plain_steps_on_the_same_kernel(tiny_model, monkeypatch, capability):
    """A baseline and a speculative arm of one process: their 1-row products (every plain step,
    and a speculative arm's steps after a fallback) run one kernel, so greedy text cannot differ
    between them by kernel; the packed weights are one copy for both."""
    if not packing_available(tiny_model):
        pytest.skip("oneDNN linear ops are not available in this torch build")
    from transformers import PreTrainedTokenizerFast

    from agenttrace.generation.local import LocalChatModel

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    tok = PreTrainedTokenizerFast(tokenizer_object=_tiny_tokenizer(), eos_token="</s>")
    base = LocalChatModel(tiny_model, tok, roofline=False)
    spec = LocalChatModel(tiny_model, tok, drafter=PromptLookupDrafter(), roofline=False)
    assert _one_row_kernel(base._runner) == _one_row_kernel(spec._runner)
    assert _one_row_kernel(spec._runner) == ("packed" if capability == "AVX512" else "stock")
    if capability == "AVX512":
        assert base._runner is spec._runner  # one packed copy of the weights
    assert LocalChatModel(tiny_model, tok, drafter=PromptLookupDrafter(), roofline=False)._runner is spec._runner


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models

    return Tokenizer(models.WordLevel({"</s>": 2, "<unk>": 0, **{f"w{i}": i for i in range(3, 64)}}, unk_token="<unk>"))
