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


@pytest.mark.parametrize("faster", [True, False])
def test_plain_steps_take_the_packed_weights_only_where_the_probe_measures_them_faster(tiny_model, monkeypatch, faster):
    if not packing_available(tiny_model):
        pytest.skip("oneDNN linear ops are not available in this torch build")
    import agenttrace.generation.packed as packed

    monkeypatch.setattr(packed, "packed_one_row_is_faster", lambda i, o: faster)
    layer = packed_view(tiny_model).model.layers[0].mlp.down_proj
    assert layer.min_rows == (1 if faster else 2)
    x = torch.randn(1, layer.linear.in_features)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer.linear(x), atol=1e-5, rtol=1e-5)


def test_the_one_row_probe_answers_once_per_shape_and_thread_count():
    from agenttrace.generation import packed

    packed._ONE_ROW.clear()
    first = packed.packed_one_row_is_faster(64, 96)
    assert isinstance(first, bool) and len(packed._ONE_ROW) == 1
    assert packed.packed_one_row_is_faster(64, 96) is first and len(packed._ONE_ROW) == 1
