"""Shared fixtures. Under tests, failures in agenttrace's own recording code raise instead of
being counted, so they cannot hide behind the telemetry guard."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AGENTTRACE_STRICT_TELEMETRY", "1")


@pytest.fixture(scope="session")
def bundled():
    """The bundled SmolLM2 model (converted into the cache on first use, ~30 s; then ~1 s)."""
    from agenttrace.generation.models import load_model

    return load_model()


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory):
    """A real Arize Phoenix (tests/phoenix_server.py), started once for the whole session (about
    15 s; its environment is built on first use) and stopped at its end. Tests that write to it
    use projects of their own (OTLP header x-project-name), or read only the spans they sent."""
    from phoenix_server import running_phoenix

    with running_phoenix(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


@pytest.fixture
def tiny_model():
    """A tiny random-weight Llama built from a config: 2 layers, vocabulary of 64."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    model.eval()
    return model
