"""The bandwidth ceiling (generation/ceiling.py): bytes a decode step reads per weight variant,
the machine probe's cache, and the llama.cpp peer saying how to get it when it is missing."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agenttrace.generation import ceiling
from agenttrace.generation.ceiling import MachinePeaks, StepBytes, ceiling_tok_s, decode_bytes
from agenttrace.generation.packed import packed_view
from agenttrace.generation.quantize import quantize_model


def small() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def test_a_step_reads_every_linear_weight_once_and_the_tied_table_as_the_head():
    model = small()
    linears = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
                  and m is not model.lm_head)
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    fp32 = decode_bytes(model)
    assert fp32.weights == 4 * (linears + 256 * 64 + norms)  # the tied table is read whole, once
    assert fp32.kv_per_token == 2 * 2 * 2 * 16 * 4  # keys and values, 2 layers, 2 KV heads of 16, fp32
    assert decode_bytes(packed_view(model)).weights == fp32.weights  # prepacked copies serve verify passes only
    quantize_model(model, "int4")
    int4 = decode_bytes(model)
    # half a byte per weight, a bf16 scale and zero per 32 weights, the head quantized, one bf16 table row
    per_weight = 0.5 + 4 / 32
    assert int4.weights == pytest.approx(per_weight * (linears + 256 * 64) + 2 * 64 + 2 * norms, rel=1e-6)
    assert int4.weights < fp32.weights / 6


def test_the_ceiling_is_bandwidth_over_the_bytes_of_a_step():
    peaks = MachinePeaks("test CPU", read_gb_s=10.0, matmul_gflop_s=100.0)
    step = StepBytes(weights=90_000_000, kv_per_token=10_000)
    assert ceiling_tok_s(step, peaks, 1000) == pytest.approx(100.0)


def test_the_machine_probe_runs_once_per_machine_and_thread_count(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ceiling, "_probe", lambda device: calls.append(device) or (12.5, 40.0))
    first = ceiling.machine_peaks(tmp_path)
    again = ceiling.machine_peaks(tmp_path)
    assert first == again and first.read_gb_s == 12.5 and len(calls) == 1
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        ceiling.machine_peaks(tmp_path)  # another thread count is another machine
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2
    (tmp_path / "machine-peaks.json").write_text("{not json")
    assert ceiling.machine_peaks(tmp_path).read_gb_s == 12.5 and len(calls) == 3  # a broken cache is measured again


def test_the_llama_arms_say_how_to_build_their_venv(tmp_path, monkeypatch):
    from agenttrace.bench.llama_peer import find_llama_python

    monkeypatch.setenv("AGENTTRACE_LLAMA_VENV", str(tmp_path / "none"))
    with pytest.raises(SystemExit, match="run scripts/llama_cpp.sh once"):
        find_llama_python()
