"""trace_generate: prefill, decode and the tokens accepted per verification step of transformers'
own assisted generation and prompt lookup, on tiny random models built from a config."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from agenttrace import MonotonicClock, trace_generate  # noqa: E402
from agenttrace import semconv as sc  # noqa: E402
from agenttrace.adapters.transformers import _Observed, build_generation  # noqa: E402
from agenttrace.testing import capture_telemetry, spans_by_name  # noqa: E402

PROMPT = [[1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6]]


def tiny(layers: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


class Recording:
    def __init__(self):
        self.puts, self.ended = [], False

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        self.ended = True


def _generate(**kwargs):
    target = tiny(2, 0)
    tel, memory = capture_telemetry(MonotonicClock())
    traced = trace_generate(target, telemetry=tel, name="tiny")
    ids = torch.tensor(PROMPT)
    out = traced.generate(ids, max_new_tokens=12, do_sample=False, **kwargs)
    plain = target.generate(ids, max_new_tokens=12, do_sample=False)
    return traced.last_generation, out, plain, memory.get_finished_spans()


def test_assisted_generation_with_an_identical_assistant_accepts_every_draft():
    assistant = tiny(2, 0)  # same seed and config: the same weights, so greedy drafts all hold
    assistant.generation_config.num_assistant_tokens = 4
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    streamer = Recording()
    gen, out, plain, spans = _generate(assistant_model=assistant, streamer=streamer)
    assert torch.equal(out, plain)  # wrapping changed nothing
    assert streamer.ended and streamer.puts[0] == PROMPT  # the caller's streamer still got every call
    assert gen.method == "draft_model" and gen.output_tokens == 12 and gen.input_tokens == 11
    assert gen.rounds and all(r.accepted == r.drafted for r in gen.rounds)
    assert 1 + sum(r.accepted + 1 for r in gen.rounds) >= 12 - 1  # every put was a verified step
    (span,) = spans_by_name(spans)["chat tiny"]
    assert span.attributes[sc.SPEC_ACCEPTANCE_RATE] == 1.0
    assert span.attributes[sc.SPEC_NUM_SPECULATIVE_TOKENS] == 4
    assert span.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert spans_by_name(spans)["prefill"][0].attributes[sc.TOKENS] == 11


def test_assisted_generation_with_a_different_assistant_counts_rejections():
    gen, out, plain, spans = _generate(assistant_model=tiny(1, 5))
    assert torch.equal(out, plain)
    drafted = sum(r.drafted for r in gen.rounds)
    accepted = sum(r.accepted for r in gen.rounds)
    assert drafted > 0 and accepted < drafted
    # each verification step adds its accepted tokens plus the target's own
    assert sum(r.accepted + 1 for r in gen.rounds) <= gen.output_tokens
    (span,) = spans_by_name(spans)["chat tiny"]
    assert span.attributes[sc.SPEC_DRAFT_TOKENS] == drafted and span.attributes[sc.SPEC_ACCEPTED_TOKENS] == accepted


def test_prompt_lookup_rounds_and_plain_generate():
    gen, out, plain, _ = _generate(prompt_lookup_num_tokens=3)
    assert torch.equal(out, plain)
    assert gen.method == "prompt_lookup" and gen.num_speculative_tokens == 3
    assert gen.rounds and all(0 < r.drafted <= 3 and 0 <= r.accepted <= r.drafted for r in gen.rounds)
    gen, out, plain, spans = _generate()
    assert gen.method == "none" and gen.rounds == () and gen.output_tokens == 12
    assert gen.prefill_start_ns < gen.prefill_end_ns <= gen.first_token_ns <= gen.end_ns
    assert gen.finish_reason == "length"


def test_build_generation_from_observed_calls_on_a_fake_clock():
    # prompt of 4 at t=0; pass 1 scores prompt + 3 drafted (t=10..20), puts 3 tokens at 21;
    # pass 2 scores 2 (1 drafted) at 30..40 and puts 1 token (rejected) at 41; EOS is token 2
    seen = _Observed(prompt_ns=0, prompt_len=4, puts=[(21, 3, 9), (41, 1, 2)], forwards=[[10, 20, 7], [30, 40, 2]])
    gen = build_generation(seen, 0, 50, "prompt_lookup", 3, {2}, 16)
    assert (gen.prefill_start_ns, gen.prefill_end_ns, gen.first_token_ns) == (10, 20, 21)
    r1, r2 = gen.rounds
    assert (r1.drafted, r1.accepted, r1.draft_start_ns, r1.draft_end_ns, r1.verify_start_ns, r1.verify_end_ns) == (3, 2, 0, 10, 20, 21)
    assert (r2.drafted, r2.accepted, r2.draft_start_ns, r2.verify_start_ns, r2.verify_end_ns) == (1, 0, 21, 30, 41)
    assert gen.output_tokens == 4 and gen.finish_reason == "stop"
