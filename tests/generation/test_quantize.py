"""The weight variants (generation/quantize.py, weights.py, invariant.py): the kernels' per-row
bits, the layers replaced, speculation lossless on each variant, sampling, and the cache."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agenttrace import FakeClock, GenerationParams
from agenttrace.errors import ModelUnavailable
from agenttrace.generation import kv
from agenttrace.generation.draft_model import DraftModelDrafter, early_exit_drafter
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.generation.invariant import use_rowwise_attention
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.packed import packed_view
from agenttrace.generation.prefix_cache import PrefixCache
from agenttrace.generation.quantize import Bf16Linear, Int4Linear, Int8Linear, quantize_model

VARIANTS = ["bf16", "int8", "int4"]
PROMPT = [1, 5, 7, 9, 5, 7, 9, 11, 5, 7]


def small(seed: int = 0, vocab: int = 96, hidden: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=True, initializer_range=0.2)
    return LlamaForCausalLM(config).eval()


def variant(kind: str, **kw) -> LlamaForCausalLM:
    model = small(**kw)
    quantize_model(model, kind)
    assert use_rowwise_attention(model)
    return model


def layer_and_input(kind: str, out: int, rows: int, bias: bool, seed: int):
    """One `kind` layer made from a random 576-wide linear layer, and `rows` bf16 input rows."""
    torch.manual_seed(seed)
    lin = torch.nn.Linear(576, out, bias=bias)
    layer = {"bf16": Bf16Linear.from_linear, "int8": Int8Linear.from_linear, "int4": Int4Linear.from_linear}[kind](lin)
    return layer, torch.randn(rows, 576).to(torch.bfloat16)


@pytest.mark.parametrize("kind", VARIANTS)
def test_the_kernels_give_each_row_the_same_bits_in_any_number_of_rows(kind):
    """The premise of the identity: if a torch or CPU changes this, the tests below say why."""
    layer, x = layer_and_input(kind, 1536, 9, bias=False, seed=1)
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(9)])
    assert torch.equal(together, alone)


@pytest.mark.parametrize("kind", VARIANTS)
def test_a_prefill_takes_the_fp32_product_of_the_same_weights(kind):
    layer, x = layer_and_input(kind, 256, 40, bias=True, seed=3)
    with torch.inference_mode():
        wide = layer(x).float()  # 40 rows: the prefill path
        short = torch.cat([layer(x[i : i + 8]) for i in range(0, 40, 8)]).float()  # the kernel path
    assert float((wide - short).norm() / short.norm()) < 0.01  # the same weights, bf16 rounding apart


@pytest.mark.parametrize("kind,cls,err", [("int4", Int4Linear, 0.09), ("int8", Int8Linear, 0.01)])
def test_every_linear_layer_is_replaced_and_each_stays_close_to_its_fp32_self(kind, cls, err):
    ref, model = small(), small()
    assert quantize_model(model, kind) == 2 * 7 + 1  # seven per layer and the (tied) head
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert isinstance(model.lm_head, cls) and model.model.embed_tokens.weight.dtype == torch.bfloat16
    torch.manual_seed(2)
    with torch.inference_mode():
        for (_, a), (_, b) in zip(ref.named_modules(), model.named_modules(), strict=True):
            if isinstance(b, cls):
                x = torch.randn(4, a.in_features)
                y = a(x)
                assert float((b(x).float() - y).norm() / y.norm()) < err  # int4: about 6% per layer


LONG = (PROMPT * 3)[:24]  # a 20-token verify pass after 4 tokens


def verify_and_steps(model, prompt=PROMPT) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of prompt[4:] after prompt[:4]: in one verify pass, and one token at a time."""
    with torch.inference_mode():
        cache_a, cache_b = kv.new_cache(model), kv.new_cache(model)
        kv.forward(model, prompt[:4], cache_a)
        kv.forward(model, prompt[:4], cache_b)
        together = kv.forward(model, prompt[4:], cache_a)
        alone = torch.cat([kv.forward(model, [t], cache_b) for t in prompt[4:]])
    return together, alone


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("prompt", [PROMPT, LONG], ids=["6 rows", "20 rows"])
def test_a_verify_pass_gives_each_position_the_bits_of_a_one_token_step(kind, prompt):
    assert torch.equal(*verify_and_steps(variant(kind), prompt))


def test_without_row_wise_attention_a_bf16_verify_pass_differs_from_one_token_steps():
    """The negative control: stock sdpa mixes a pass's rows, and bf16 makes the difference show.
    On an AVX2 CPU a 6-row pass showed it; on one with native bf16 (AVX512-BF16, AMX) a 6-row
    pass happened to agree and a 20-row one did not, so the control takes the longer pass (and
    the same pass with row-wise attention agrees: the difference is the attention's)."""
    assert not torch.equal(*verify_and_steps(small().to(torch.bfloat16), LONG))
    stock_linear = small().to(torch.bfloat16)
    assert use_rowwise_attention(stock_linear)
    assert torch.equal(*verify_and_steps(stock_linear, LONG))


@pytest.mark.parametrize("kind", VARIANTS)
def test_greedy_speculation_on_each_variant_equals_its_own_plain_greedy(kind):
    model = variant(kind)
    stop = StopCriteria(frozenset({2}), 40)
    # the last one is longer than a short pass: its prefill takes the dequantized fp32 path
    prompts = [PROMPT, [3, 4, 3, 4, 3, 4, 3], list(range(20, 60)) + list(range(20, 26))]
    for prompt in prompts:
        plain = generate(model, prompt, GenerationParams(), stop, FakeClock())
        drafters = [(PromptLookupDrafter(), 4), (PromptLookupDrafter(), 12), (early_exit_drafter(model, 1), 3)]
        for drafter, k in drafters:
            for runner in (model, packed_view(model)):  # packing leaves these variants alone
                spec = generate(runner, prompt, GenerationParams(), stop, FakeClock(), drafter=drafter,
                                num_speculative_tokens=k)
                assert spec.tokens == plain.tokens, (kind, prompt, type(drafter).__name__, k)


@pytest.mark.parametrize("kind", VARIANTS)
def test_the_prefix_cache_keeps_outputs_on_each_variant(kind):
    model = variant(kind)
    stop = StopCriteria(frozenset({2}), 16)
    cache = PrefixCache()
    first = PROMPT + [13, 14]
    generate(model, first, GenerationParams(), stop, FakeClock(), prefix_cache=cache)
    second = first + [15, 16, 5, 7]
    with_cache = generate(model, second, GenerationParams(), stop, FakeClock(), prefix_cache=cache,
                          drafter=PromptLookupDrafter(), num_speculative_tokens=4)
    without = generate(model, second, GenerationParams(), stop, FakeClock())
    assert with_cache.cached_tokens > 0 and with_cache.tokens == without.tokens


def test_sampling_on_a_quantized_target_keeps_its_distribution():
    """The loop's rejection sampling on an int4 target with a bf16 draft model: the first two
    tokens against the exact distribution of the int4 model (as tests/generation/test_verify.py does in fp32)."""
    from test_verify import P_MIN

    v = 16
    target, draft = variant("int4", vocab=v, hidden=32, seed=3), variant("bf16", vocab=v, hidden=32, seed=4)
    params = GenerationParams(temperature=1.0)
    prompt = [1, 5, 3]
    with torch.inference_mode():  # p(x1), p(x2 | x1) of the int4 model
        grid = torch.cat([torch.tensor(prompt).expand(v, -1), torch.arange(v)[:, None]], 1)
        from agenttrace.generation import sampling

        probs = sampling.probabilities(target(input_ids=grid).logits[:, -2:].float(), params)
    exact = (probs[0, 0][:, None] * probs[:, 1]).ravel()
    stop = StopCriteria(frozenset(), 2)
    drafter = DraftModelDrafter(draft)
    codes = [
        (lambda o: o.tokens[0] * v + o.tokens[1])(
            generate(target, prompt, GenerationParams(temperature=1.0, seed=s), stop, FakeClock(), drafter=drafter,
                     num_speculative_tokens=3)
        )
        for s in range(1500)
    ]
    counts = np.bincount(codes, minlength=v * v)
    exp = exact.numpy() * len(codes)
    keep = exp >= 5
    stat = float((((counts - exp) ** 2)[keep] / exp[keep]).sum())
    df = int(keep.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    assert 0.5 * math.erfc(z / math.sqrt(2)) > P_MIN


def test_bad_requests_say_what_to_do(tmp_path):
    from agenttrace.generation.models import load_model

    with pytest.raises(ValueError, match="choose from int4, int8"):
        quantize_model(small(), "int3")  # type: ignore[arg-type]
    odd = small()
    odd.lm_head = torch.nn.Linear(60, 96, bias=False)  # a width the int4 group does not divide stays bf16
    assert quantize_model(odd, "int4") == 2 * 7
    assert type(odd.lm_head) is torch.nn.Linear and odd.lm_head.weight.dtype == torch.bfloat16
    with pytest.raises(ModelUnavailable, match="choose from int4, int8"):
        load_model(str(tmp_path), quantize="int2")
    with pytest.raises(ModelUnavailable, match="CPU kernels; on cuda use dtype bfloat16"):
        load_model(str(tmp_path), quantize="int4", device="cuda")


@pytest.fixture
def saved_model(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "tiny"
    small().save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(96)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="t2").save_pretrained(folder)
    return folder


def test_the_quantized_weights_are_cached_and_read_back_bit_for_bit(saved_model, tmp_path, caplog):
    from agenttrace.generation.models import load_model

    first = load_model(str(saved_model), quantize="int4")
    assert first.weights == "int4" and "quantize" in first.phases_s
    second = load_model(str(saved_model), quantize="int4")
    assert "quantize" not in second.phases_s and "read cached quantized weights" in second.phases_s
    assert isinstance(second.model.lm_head, Int4Linear)
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        assert torch.equal(first.model(input_ids=ids).logits, second.model(input_ids=ids).logits)
    stop = StopCriteria(frozenset({2}), 24)
    spec = generate(second.model, PROMPT, GenerationParams(), stop, FakeClock(), drafter=PromptLookupDrafter(),
                    num_speculative_tokens=4)
    assert spec.tokens == generate(first.model, PROMPT, GenerationParams(), stop, FakeClock()).tokens
    # a damaged cache is said and replaced, not trusted
    (weights,) = (tmp_path / "cache" / "weights").glob("*/weights.safetensors")
    weights.write_bytes(b"not a safetensors file")
    with caplog.at_level(logging.WARNING):
        third = load_model(str(saved_model), quantize="int4")
    assert "quantize" in third.phases_s and "quantizing again" in caplog.text


@pytest.mark.model
def test_the_bundled_model_speculates_losslessly_in_int4():
    from agenttrace import LocalChatModel, Message, load_model

    loaded = load_model(quantize="int4")  # its own copy: the session's bundled fixture stays fp32
    assert loaded.weights == "int4" and isinstance(loaded.model.lm_head, Int4Linear)
    plain = LocalChatModel(loaded.model, loaded.tokenizer)
    spec = LocalChatModel(loaded.model, loaded.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=16,
                          adaptive=True)
    for prompt in ("Call the weather tool for Paris as JSON.", "Repeat: alpha beta gamma alpha beta gamma",
                   "Write two sentences about rivers."):
        messages = [Message("user", prompt)]
        a = plain.chat(messages, GenerationParams(max_tokens=48))
        b = spec.chat(messages, GenerationParams(max_tokens=48))
        assert a.text == b.text and a.text.strip()
