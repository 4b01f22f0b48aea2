"""Which weights the llama.cpp backend maps (generation/llama_weights.py): the file, or its Q8_0
copy made once by llama.cpp's quantizer; `auto` reads the measured answer from the cache."""

from __future__ import annotations

import pytest

from agenttrace import GenerationParams
from agenttrace.core.chat import Message

pytest.importorskip("llama_cpp_py_sync._cffi_bindings", reason="the llamacpp extra is not installed")


@pytest.fixture
def gguf():
    from agenttrace.errors import ModelUnavailable
    from agenttrace.generation.models import find_bundled_gguf

    try:
        return find_bundled_gguf()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))


def test_unknown_choices_are_refused_with_the_choices(gguf, tmp_path):
    from agenttrace.generation.llama_weights import choose_weights

    with pytest.raises(ValueError, match="auto, file, q8_0"):
        choose_weights(gguf, 1, "q4_0", tmp_path)
    assert choose_weights(gguf, 1, "file", tmp_path) == (gguf, "file")
    assert not any(tmp_path.iterdir())  # the file as it is: nothing written


@pytest.mark.model
def test_the_q8_copy_is_made_once_and_runs_the_files_model(gguf, tmp_path):
    """The copy is written once into the cache and reused; on it the bundled model answers as on
    the file (its first greedy tokens: Q8_0 of a Q4_1 file is within an eighth of its step)."""
    from agenttrace.generation.llama_weights import choose_weights
    from agenttrace.generation.models import cache_dir, load_model

    path, kind = choose_weights(gguf, 1, "q8_0", tmp_path)
    assert kind == "q8_0" and path.parent == tmp_path / "gguf" and path.stat().st_size > gguf.stat().st_size
    made = path.stat().st_mtime_ns
    assert choose_weights(gguf, 1, "q8_0", tmp_path) == (path, "q8_0") and path.stat().st_mtime_ns == made
    assert not list(path.parent.glob("*.tmp*"))

    from agenttrace.generation.local import LocalChatModel

    texts = {}
    for weights in ("file", "q8_0"):
        loaded = load_model(backend="llama.cpp", threads=1, n_ctx=1024, gguf_weights=weights)
        # (the user's cache here: its tokenizer and kernel probe are made once per test session)
        assert loaded.source == str(choose_weights(gguf, 1, "q8_0", cache_dir())[0] if weights == "q8_0" else gguf)
        assert ("Q8_0 copy" in loaded.note) == (weights == "q8_0")
        chat = LocalChatModel(loaded.model, loaded.tokenizer)
        reply = chat.chat([Message(role="user", content="What is the capital of France?")], GenerationParams(max_tokens=6))
        texts[weights] = reply.text
        loaded.model.close()
    assert texts["q8_0"] == texts["file"] and texts["file"]


def test_auto_takes_the_answer_measured_once(gguf, tmp_path, monkeypatch):
    """A process reads the measured answer from the cache (every arm and process the same weights);
    a cache that cannot be read is measured again, not trusted."""
    from agenttrace.generation import llama_weights
    from agenttrace.generation.cache import write_json
    from agenttrace.generation.llama_kernels import decision_key

    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path))
    key = decision_key(gguf, 1)
    write_json("llama-weights.json", {key: {"weights": "file", "cost_s": {"file": 1.0, "q8_0": 2.0}}})
    assert llama_weights.choose_weights(gguf, 1, "auto", tmp_path) == (gguf, "file")
    assert not (tmp_path / "gguf").exists()  # no copy made when the file was measured faster

    measured = []
    monkeypatch.setattr(llama_weights, "_cost_s", lambda model: measured.append(model.path) or
                        (0.5 if model.path.name.endswith("Q8_0.gguf") else 1.0))
    path, kind = llama_weights.choose_weights(gguf, 2, "auto", tmp_path)  # another thread count: measured
    assert kind == "q8_0" and len(measured) == 4 and path.name.endswith(".Q8_0.gguf")
    from agenttrace.generation.cache import read_json

    assert read_json("llama-weights.json")[decision_key(gguf, 2)]["weights"] == "q8_0"
