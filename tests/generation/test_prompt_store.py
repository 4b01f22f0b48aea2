"""Shared prompt prefixes on disk (generation/prompt_store.py): the longest stored prefix loads,
a prefix covered by a stored one is not written again, the store stays within its bytes, and a
broken file or an unwritable folder costs a prefill, never the call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenttrace import GenerationParams
from agenttrace.core.chat import Message
from agenttrace.generation.prompt_store import MIN_TOKENS, PromptStore


class _Cache:
    """A cache whose state file is its tokens as JSON, padded to `pad` bytes."""

    def __init__(self, tokens=(), pad: int = 0) -> None:
        self.tokens, self.pad = list(tokens), pad

    def save(self, path: Path, tokens) -> None:
        assert self.tokens[: len(tokens)] == list(tokens)
        path.write_text(json.dumps(list(tokens)) + " " * self.pad)

    def load(self, path: Path, tokens) -> None:
        if json.loads(path.read_text()) != list(tokens):
            raise ValueError("other tokens")
        self.tokens = list(tokens)


class _Model:
    """What kv.new_cache asks of a model that keeps its own caches."""

    def new_cache(self, tokens: int) -> _Cache:
        return _Cache()

    def forward(self, ids, cache, last_only=False):  # pragma: no cover - not run
        raise AssertionError

    def prefill(self, ids, cache):  # pragma: no cover - not run
        raise AssertionError


SYSTEM = list(range(1000, 1000 + MIN_TOKENS + 10))


def test_the_longest_stored_prefix_loads_and_a_covered_one_is_not_written(tmp_path):
    store = PromptStore(tmp_path / "s")
    assert store.load(_Model(), SYSTEM + [1, 2], 0) is None  # nothing yet
    more = list(range(7, 7 + MIN_TOKENS))  # enough more tokens to pay for a second file
    store.save(_Cache(SYSTEM + more), SYSTEM)
    store.save(_Cache(SYSTEM + more), SYSTEM + more)
    store.save(_Cache(SYSTEM + more), SYSTEM[:-3])  # covered by the first: not written
    store.save(_Cache(SYSTEM), SYSTEM[: MIN_TOKENS - 1])  # too short to pay for a file
    assert store.saves == 2 and len(list((tmp_path / "s").glob("*.kv"))) == 2
    cache, n = store.load(_Model(), SYSTEM + more + [9, 9], 0)
    assert n == len(SYSTEM) + MIN_TOKENS and cache.tokens == SYSTEM + more
    cache, n = store.load(_Model(), SYSTEM + [5], 0)
    assert n == len(SYSTEM)
    assert store.load(_Model(), SYSTEM, 0) is None  # never the whole prompt: its last token must run
    assert store.load(_Model(), SYSTEM + [5], 0, longer_than=len(SYSTEM)) is None  # memory had as much
    assert store.loads == 2


def test_a_broken_file_leaves_the_index_and_the_call_prefills(tmp_path):
    store = PromptStore(tmp_path)
    store.save(_Cache(SYSTEM), SYSTEM)
    (name,) = [p for p in tmp_path.glob("*.kv")]
    name.write_text("[1, 2, 3]")  # another model's, or truncated
    assert store.load(_Model(), SYSTEM + [1], 0) is None
    assert not name.exists() and json.loads((tmp_path / "index.json").read_text()) == {}
    (tmp_path / "index.json").write_text("{not json")
    assert store.load(_Model(), SYSTEM + [1], 0) is None


def test_the_store_keeps_within_its_bytes_newest_first(tmp_path):
    store = PromptStore(tmp_path, max_bytes=3500)  # two ~1.45 kB files
    for i in range(4):
        store.save(_Cache([i] + SYSTEM, pad=1000), [i] + SYSTEM)
    kept = json.loads((tmp_path / "index.json").read_text())
    assert sorted(t[0] for t in kept.values()) == [2, 3] and len(list(tmp_path.glob("*.kv"))) == 2


def test_an_unwritable_folder_costs_nothing_but_the_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = PromptStore(blocker / "store")  # its parent is a file: mkdir fails
    store.save(_Cache(SYSTEM), SYSTEM)
    assert store.saves == 0 and store.load(_Model(), SYSTEM + [1], 0) is None


@pytest.mark.model
def test_a_fresh_context_starts_from_the_opening_another_kept_and_generates_the_same(tmp_path):
    """On llama.cpp: a chat model's first call prefills its conversation's opening (here the
    system message) in a pass of its own and keeps it on disk, then prefills the request; a
    second conversation with the same opening adds nothing to the store. Chat models with an
    empty memory and a context of their own (as a new process has) load the opening for their
    first call, prefill the request the same way, and generate exactly the first call's text."""
    pytest.importorskip("llama_cpp_py_sync", reason="the llamacpp extra is not installed")
    from agenttrace import LocalChatModel, PromptLookupDrafter, load_model
    from agenttrace.generation.local import opening_prefix
    from agenttrace.generation.prefix_cache import PrefixCache

    loaded = load_model(backend="llama.cpp", threads=1, n_ctx=2048, gguf_weights="file")
    store = PromptStore(tmp_path / "prompts")
    system = Message(role="system", content="You call tools with JSON arguments. " + "Tools: weather(city), "
                     "search(q), convert(value, from, to), calendar(date), email(to, body). " * 3)
    asks = [[system, Message(role="user", content=q)] for q in ("Weather in Paris?", "Search for llamas.")]
    first = LocalChatModel(loaded.model, loaded.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=3,
                           prefix_cache=PrefixCache(store=store))
    text = first.chat(asks[0], GenerationParams(max_tokens=24)).text
    assert store.saves == 1 and first.prefix_cache.hits == 0  # the opening, a pass of the call itself
    first.chat(asks[1], GenerationParams(max_tokens=24))
    assert store.saves == 1 and first.prefix_cache.hits == 1
    ids = first.encode_chat(asks[0])
    n = opening_prefix(loaded.tokenizer, asks[0], ids)
    for _ in range(2):
        fresh = LocalChatModel(loaded.model, loaded.tokenizer, prefix_cache=PrefixCache(store=store))
        assert fresh.chat(asks[0], GenerationParams(max_tokens=24)).text == text
        assert fresh.prefix_cache.reused_tokens == n > 60
    assert store.loads == 2 and store.saves == 1
    loaded.model.close()


def test_the_opening_prefix_is_the_conversation_before_its_last_message_as_rendered_alone():
    pytest.importorskip("llama_cpp_py_sync", reason="the llamacpp extra is not installed")
    from agenttrace import load_model
    from agenttrace.generation.local import encode_chat, opening_prefix

    tok = load_model(backend="llama.cpp", threads=1, n_ctx=256, gguf_weights="file").tokenizer
    system, user = Message(role="system", content="You call tools."), Message(role="user", content="Hi")
    example = [Message(role="user", content="Weather in Oslo?"), Message(role="assistant", content='{"name": "w"}')]
    ids = encode_chat(tok, [system, user])
    n = opening_prefix(tok, [system, user], ids)
    assert 0 < n < len(ids) and tok.decode(ids[:n]).rstrip().endswith("You call tools.<|im_end|>")
    with_examples = [system, *example, user]
    ids = encode_chat(tok, with_examples)
    n = opening_prefix(tok, with_examples, ids)
    assert tok.decode(ids[:n]).rstrip().endswith('{"name": "w"}<|im_end|>') and "Hi" not in tok.decode(ids[:n])
    assert opening_prefix(tok, [user], encode_chat(tok, [user])) == 0  # nothing before the request
    assert opening_prefix(tok, [system, user], encode_chat(tok, [user])) == 0  # not a prefix of these ids


def test_a_prefix_within_min_tokens_of_a_stored_one_is_not_written(tmp_path):
    store = PromptStore(tmp_path)
    store.save(_Cache(SYSTEM + list(range(200))), SYSTEM)
    store.save(_Cache(SYSTEM + list(range(200))), SYSTEM + list(range(MIN_TOKENS - 1)))
    assert store.saves == 1
    store.save(_Cache(SYSTEM + list(range(200))), SYSTEM + list(range(MIN_TOKENS)))
    assert store.saves == 2
