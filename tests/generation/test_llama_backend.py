"""The llama.cpp backend (generation/llama_backend.py): the prebuilt library loads here, our loop
runs on it, greedy speculation gives plain greedy's text, and what it cannot take says so."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agenttrace import GenerationParams
from agenttrace.core.chat import Message

bindings = pytest.importorskip("llama_cpp_py_sync._cffi_bindings", reason="the llamacpp extra is not installed")

_SO = sorted(p for p in Path(bindings.__file__).parent.iterdir() if ".so" in p.name)
_PROMPTS = [
    "What's the weather in Paris, France? Use the weather tool with city Paris and country France.",
    "Convert 12 miles to kilometres with the convert_units tool: value 12, from miles, to kilometres.",
    "Write a haiku about latency.",
]


def _needs(data: bytes) -> set[bytes]:
    """The version names a library's verneed entries ask of other libraries."""
    from agenttrace.generation.llama_lib import version_needs

    return {text for entries in version_needs(bytearray(data)) for *_, text in entries}


def test_the_c99_copy_asks_nothing_of_glibc_2_38_and_changes_nothing_else():
    from agenttrace.generation.llama_lib import c99_imports

    for path in _SO:
        data = bytearray(path.read_bytes())
        before = bytes(data)
        changed = c99_imports(data)
        assert b"GLIBC_2.38" not in _needs(data), path.name
        assert (changed > 0) == (b"GLIBC_2.38" in _needs(before)), path.name
        assert len(data) == len(before)
        assert sum(a != b for a, b in zip(data, before, strict=True)) <= 8 * changed  # a few words per entry
    with pytest.raises(ValueError, match="ELF"):
        c99_imports(bytearray(b"not a library"))


@pytest.fixture(scope="module")
def llama():
    """The bundled GGUF on llama.cpp, one thread (its verify passes then give each position a
    one-token step's bits), with its tokenizer read without transformers (chat_tokenizer.py)."""
    from agenttrace.generation.models import load_model

    loaded = load_model(backend="llama.cpp", threads=1, n_ctx=2048, gguf_weights="file")
    model = loaded.model
    yield model, loaded.tokenizer
    model.close()


def _sequences_back(chat_model) -> bool:
    """Every generation on the chat model's own context gave its sequence back."""
    from agenttrace.generation.llama_backend import SEQUENCES

    return sorted(chat_model._runner._free) == list(range(SEQUENCES))


def _ids(chat_model, text: str) -> list[int]:
    return chat_model.encode_chat([Message(role="system", content="You call tools with JSON arguments."),
                                   Message(role="user", content=text)])


@pytest.mark.model
def test_greedy_speculation_on_llama_cpp_equals_its_plain_greedy(llama):
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    model, tok = llama
    plain = LocalChatModel(model, tok)
    assert plain.provider_name == "llama.cpp" and model.vocab_size == len(tok)
    arms = {k: LocalChatModel(model, tok, drafter=PromptLookupDrafter(), num_speculative_tokens=k, fallback=False)
            for k in (3, 8)}
    arms[16] = LocalChatModel(model, tok, drafter=PromptLookupDrafter(), num_speculative_tokens=16, adaptive=True)
    drafted = accepted = rejected = 0
    for text in _PROMPTS:
        ids = _ids(plain, text)
        _, base = plain.complete_ids(ids, GenerationParams(max_tokens=48))
        assert len(base.tokens) > 0
        for k, arm in arms.items():
            _, out = arm.complete_ids(ids, GenerationParams(max_tokens=48))
            assert out.tokens == base.tokens, (k, text)
            drafted += sum(r.drafted for r in out.rounds)
            accepted += sum(r.accepted for r in out.rounds)
            rejected += sum(r.accepted < r.drafted for r in out.rounds)
    assert accepted > 0 and rejected > 0  # drafts were kept and cut back out of llama.cpp's KV cache
    assert all(_sequences_back(m) for m in (plain, *arms.values()))
    assert len({id(m._runner) for m in (plain, *arms.values())}) == 4  # a context each, one mapped model


@pytest.mark.model
def test_a_prefix_cache_on_llama_cpp_reuses_cells_and_keeps_arms_identical(llama):
    """Over a conversation, each call starts from the longest prefix an earlier call left in the
    arm's own context (cells shared by llama_memory_seq_cp, nothing copied); plain and
    speculative arms with a prefix cache give the same text at every turn."""
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    model, tok = llama
    arms = {"plain": LocalChatModel(model, tok, prefix_cache=True),
            "k3": LocalChatModel(model, tok, drafter=PromptLookupDrafter(), num_speculative_tokens=3,
                                 fallback=False, prefix_cache=True),
            "adaptive": LocalChatModel(model, tok, drafter=PromptLookupDrafter(), num_speculative_tokens=16,
                                       adaptive=True, prefix_cache=True)}
    texts = {}
    for name, arm in arms.items():
        history = [Message(role="system", content="You call tools with JSON arguments: weather(city), search(q).")]
        texts[name] = []
        for text in _PROMPTS:
            history.append(Message(role="user", content=text))
            reply = arm.chat(history, GenerationParams(max_tokens=32))
            texts[name].append(reply.text)
            history.append(Message(role="assistant", content=reply.text))
        cache = arm.prefix_cache
        assert cache.hits == len(_PROMPTS) - 1 and cache.reused_tokens > 100, name
        assert 0 < cache.nbytes <= cache._entries[-1].native.max_kept_bytes
    assert texts["k3"] == texts["plain"] and texts["adaptive"] == texts["plain"]
    for arm in arms.values():
        kept = len(arm.prefix_cache)
        assert sorted(arm._runner._free + [e.native.seq for e in arm.prefix_cache._entries]) == sorted(
            range(len(arm._runner._free) + kept))  # a sequence per kept entry, the rest free


@pytest.mark.model
def test_a_long_call_takes_the_cells_a_prefix_cache_kept_rather_than_fail(llama):
    """The kept entries may hold half the context; a call that needs more cells than are free gets
    the oldest kept entry's cells back (the entry leaves the cache) instead of failing."""
    from agenttrace.generation.llama_backend import LlamaCppModel
    from agenttrace.generation.local import LocalChatModel

    shared, tok = llama
    model = LlamaCppModel(shared.path, threads=1, n_ctx=512)  # a small context: short prompts fill it
    cached = LocalChatModel(model, tok, prefix_cache=True)
    short = _ids(cached, "Remember these cities: " + ", ".join(["Paris", "Lyon", "Nice", "Lille"] * 22))
    long = _ids(cached, "Summarise these readings: " + " ".join(f"{i} degrees" for i in range(90)))
    assert 170 < len(short) < model.n_ctx // 2 and model.n_ctx // 2 < len(long) < model.n_ctx - 32
    cached.complete_ids(short, GenerationParams(max_tokens=8))
    assert len(cached.prefix_cache) == 1
    _, out = cached.complete_ids(long, GenerationParams(max_tokens=16))  # kept + long > the context
    # (not compared with `alone`'s tokens: which cells a call gets changes attention's summation
    # order, so the last bits, and greedy text can part at a near-tie)
    assert len(out.tokens) == 16 or out.tokens[-1] in cached.eos_ids
    # the short prompt's entry left the cache (the long call is more than a cache may keep)
    assert len(cached.prefix_cache) == 0 and cached.prefix_cache.nbytes == 0
    model.close()


@pytest.mark.model
def test_siblings_generate_at_once_each_in_its_own_sequence(llama):
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    model, tok = llama
    first = LocalChatModel(model, tok, drafter=PromptLookupDrafter(), num_speculative_tokens=3, fallback=False)
    models = [first, first.sibling(), first.sibling()]
    outs: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            _, out = models[i].complete_ids(_ids(first, _PROMPTS[i]), GenerationParams(max_tokens=32))
            outs[i] = out.tokens
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(outs) == 3 and all(outs.values())
    assert all(_sequences_back(m) for m in models)
    # each sibling has a context of its own: alone, each prompt gives the very same tokens
    for i in range(3):
        _, alone = first.complete_ids(_ids(first, _PROMPTS[i]), GenerationParams(max_tokens=32))
        assert alone.tokens == outs[i]


@pytest.mark.model
def test_what_the_backend_cannot_take_it_says(llama, bundled):
    from agenttrace.errors import ContextTooLong
    from agenttrace.generation.llama_backend import LlamaCppModel
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import find_bundled_gguf

    model, tok = llama
    with pytest.raises(ValueError, match="compiled graphs"):
        LocalChatModel(model, tok, compiled=True)
    small = LlamaCppModel(find_bundled_gguf(), threads=1, n_ctx=64)  # llama.cpp pads it; its batch stays smaller
    n = small.n_ctx
    try:
        chat = LocalChatModel(small, tok)
        _, out = chat.complete_ids(list(range(100, 100 + small.n_batch + 16)), GenerationParams(max_tokens=4))
        assert len(out.tokens) == 4  # a prompt longer than one llama_decode takes is prefilled in chunks
        with pytest.raises(ContextTooLong, match=f"holds {n} positions"):
            chat.complete_ids(list(range(100, 110 + n)), GenerationParams(max_tokens=4))
        cache = small.new_cache(n)
        small.prefill(list(range(100, 96 + n)), cache)
        with pytest.raises(ValueError, match=f"do not fit llama.cpp's context of {n}"):
            small.forward([5, 6, 7, 8, 9], cache)
        with pytest.raises(ValueError, match="at most"):
            small.forward(list(range(small.n_batch + 1)), cache)
        del cache
        assert _sequences_back(chat)  # every cache gave its sequence back
        _, out = chat.complete_ids(list(range(100, 120)), GenerationParams(max_tokens=4))
        assert len(out.tokens) == 4  # and the model still serves
    finally:
        small.close()
    with pytest.raises(Exception, match="GGUF"):
        LlamaCppModel(Path(bundled.source) / "no-such.gguf")


@pytest.mark.model
def test_two_threads_take_one_kernel_path_and_stay_lossless_while_the_cores_are_busy(bundled):
    """The kernel path is decided once (a probe, kept in the cache): on this CPU llama.cpp's
    one-token steps on two threads over an f16 KV cache differ from its batched rows past 256
    cells, so the probe picks a KV cache type and threads on which they agree (verify passes of 2
    and 5 rows checked), and probing afresh under load gives the same answer. Greedy speculation
    then equals plain greedy on long prompts, with two other processes spinning on the cores."""
    import subprocess
    import sys

    import torch

    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.llama_backend import LlamaCppModel
    from agenttrace.generation.llama_kernels import KV_TYPES, probe
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import find_bundled_gguf

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    model = LlamaCppModel(find_bundled_gguf(), threads=2, n_ctx=2048)
    try:
        assert model.lossless and model.step_threads in (1, 2) and model.verify_threads in (1, 2)
        assert model.kv_cache in KV_TYPES and probe(2, model.probe_context) == model.kernel_path
        cache = model.new_cache(400)
        model.prefill(list(range(100, 420)), cache)  # past the 256 cells where the paths part
        steps = [model.forward([t], cache)[0] for t in range(300, 305)]
        for width in (2, 5):
            cache.crop(320)
            batch = model.forward(list(range(300, 300 + width)), cache)
            assert all(torch.equal(batch[i], steps[i]) for i in range(width))
        del cache
        plain = LocalChatModel(model, bundled.tokenizer)
        spec = LocalChatModel(model, bundled.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=3,
                              fallback=False)
        schema = " ".join(f"tool_{i}(city: string, country: string, unit: celsius|fahrenheit)" for i in range(24))
        ids = spec.encode_chat([Message(role="system", content=f"Tools: {schema}. Reply with one JSON tool call."),
                                Message(role="user", content=_PROMPTS[0])])
        assert len(ids) > 300
        _, a = plain.complete_ids(ids, GenerationParams(max_tokens=40))
        _, b = spec.complete_ids(ids, GenerationParams(max_tokens=40))
        assert a.tokens == b.tokens and b.rounds
    finally:
        model.close()
        for p in busy:
            p.kill()
            p.wait()


@pytest.mark.model
def test_llama_cpp_computes_the_model_transformers_computes(llama, bundled):
    """Teacher-forced over a chat and a reply, passes of 16 tokens after the cached ones (positions
    and the KV cache carried across passes): the same next token as the fp32 model at every
    position (measured: 71 of 71), logits a quantization's distance apart."""
    import torch

    from agenttrace.generation.local import LocalChatModel

    model, tok = llama
    chat = LocalChatModel(bundled.model, tok)
    ids = chat.encode_chat([Message(role="user", content="Why is the sky blue? Then list three rainbow colours.")])
    ids += tok.encode("The sky looks blue because the air scatters short blue wavelengths of sunlight more than red.")
    with torch.inference_mode():
        ref = bundled.model(torch.tensor([ids])).logits[0].float()
    cache = model.new_cache(len(ids))
    out = torch.cat([model.forward(ids[i : i + 16], cache) for i in range(0, len(ids), 16)])
    assert out.shape == ref.shape and cache.get_seq_length() == len(ids)
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.95
    assert (out - ref).abs().mean() < 0.1 * ref.std()


@pytest.mark.model
def test_the_trained_heads_draft_from_llama_cpps_features_and_change_nothing(llama):
    """llama.cpp's embeddings output is the features the heads read (the last hidden state after
    the final norm): a features pass gives the plain pass's logits bit for bit, and the shipped
    EAGLE and Medusa heads, bound to the file's own tables (their fingerprint is the fp32
    model's), draft chains that greedy verification keeps lossless. Trees are refused: a tree
    pass needs an attention mask llama.cpp's batch does not take."""
    import torch

    from agenttrace.generation.head_drafters import TreeShape, head_drafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import BUNDLED_MODEL_NAME

    model, tok = llama
    plain = LocalChatModel(model, tok)
    ids = _ids(plain, _PROMPTS[0])
    a, b = model.new_cache(len(ids) + 8), model.new_cache(len(ids) + 8)
    model.prefill(ids, a)
    model.prefill(ids, b)
    logits, hidden = model.forward_features([5, 6, 7], a)
    assert torch.equal(logits, model.forward([5, 6, 7], b)) and hidden.shape == (3, model.config.hidden_size)
    del a, b
    arms = [LocalChatModel(model, tok, drafter=head_drafter(kind, model, BUNDLED_MODEL_NAME), num_speculative_tokens=k,
                           fallback=False, prefix_cache=True) for kind, k in (("eagle", 4), ("medusa", 3))]
    accepted = 0
    for text in _PROMPTS:
        ids = _ids(plain, text)
        _, base = plain.complete_ids(ids, GenerationParams(max_tokens=32))
        for arm in arms:
            for _ in range(2):  # the second call from the prefix cache's entry and its kept features
                _, out = arm.complete_ids(ids, GenerationParams(max_tokens=32))
                assert out.tokens == base.tokens, (arm.drafter.method, text)
                accepted += sum(r.accepted for r in out.rounds)
    assert accepted > 0 and arms[0].prefix_cache.hits > 0
    with pytest.raises(ValueError, match="draft trees"):
        LocalChatModel(model, tok, drafter=head_drafter("eagle", model, BUNDLED_MODEL_NAME, tree=TreeShape()))
