"""The tokenizer read without transformers (generation/chat_tokenizer.py): transformers' ids and
text on the bundled model, llguidance maps it, and the llama.cpp path never imports transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agenttrace.core.chat import Message

_CHATS = [
    [{"role": "user", "content": "What's the weather in Paris? ünïcödé 日本語 emoji 🌦\n\n  two  spaces "}],
    [{"role": "system", "content": 'You call tools. Reply {"tool": "weather", "arguments": {"city": "Oslo"}}'},
     {"role": "user", "content": "hi"}, {"role": "assistant", "content": '{"tool": "search", "arguments": {}}'},
     {"role": "tool", "content": "42\t<|im_end|> is text here"}],
    [{"role": "user", "content": ""}],
]


@pytest.fixture(scope="module")
def chat_tokenizer():
    from agenttrace.generation.chat_tokenizer import ChatTokenizer, tokenizer_folder
    from agenttrace.generation.models import cache_dir, find_bundled_gguf

    return ChatTokenizer.from_folder(tokenizer_folder(find_bundled_gguf(), cache_dir()))


@pytest.mark.model
def test_it_renders_encodes_and_decodes_as_transformers_does(chat_tokenizer, bundled):
    from agenttrace.generation.chat_tokenizer import ChatTokenizer

    hf = bundled.tokenizer
    saved = ChatTokenizer.from_folder(bundled.source)  # the converted model's own folder reads the same
    for ours in (chat_tokenizer, saved):
        assert (ours.eos_token_id, len(ours)) == (hf.eos_token_id, len(hf))
        for chat in _CHATS:
            for opened in (True, False):
                text = hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=opened)
                assert ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=opened) == text
                ids = hf(text, add_special_tokens=False)["input_ids"]
                assert ours(text, add_special_tokens=False)["input_ids"] == ids
                assert ours.apply_chat_template(chat, add_generation_prompt=opened) == ids
                for skip in (True, False):
                    assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


def test_a_folder_without_its_files_says_what_to_do(tmp_path):
    from agenttrace.errors import ModelUnavailable
    from agenttrace.generation.chat_tokenizer import ChatTokenizer

    with pytest.raises(ModelUnavailable, match="tokenizer.json does not exist.*transformers"):
        ChatTokenizer.from_folder(tmp_path)


@pytest.mark.model
def test_llguidance_maps_it_and_constrains_with_it(chat_tokenizer, bundled):
    from agenttrace.clock import FakeClock
    from agenttrace.core.chat import Constraint
    from agenttrace.generation.constrain import GrammarCompiler

    eos = [chat_tokenizer.eos_token_id]
    compiler = GrammarCompiler(chat_tokenizer, len(chat_tokenizer), eos)
    schema = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    compiled = compiler.compile(Constraint("json_schema", schema), FakeClock())
    assert compiled.error is None and compiled.prototype is not None
    # the same tokens allowed at the start as with transformers' tokenizer
    theirs = GrammarCompiler(bundled.tokenizer, len(chat_tokenizer), eos).compile(Constraint("json_schema", schema),
                                                                                FakeClock())
    assert compiled.prototype.compute_bitmask() == theirs.prototype.compute_bitmask()


@pytest.mark.model
def test_the_llama_cpp_path_never_imports_transformers(chat_tokenizer):
    """Load the bundled GGUF on llama.cpp and generate under a grammar in a fresh process: the 2.4 s
    of importing transformers (and its 1 s tokenizer) are no part of this backend's cold start."""
    pytest.importorskip("llama_cpp_py_sync", reason="the llamacpp extra is not installed")
    code = (
        "import sys, json\n"
        "from agenttrace import GenerationParams, LocalChatModel, load_model\n"
        "from agenttrace.core.chat import Constraint, Message\n"
        "loaded = load_model(backend='llama.cpp', threads=1, n_ctx=1024, gguf_weights='file')\n"
        "chat = LocalChatModel(loaded.model, loaded.tokenizer, prefix_cache=True)\n"
        "schema = json.dumps({'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']})\n"
        "g = chat.chat([Message(role='user', content='Weather in Paris? Give JSON with the city.')],\n"
        "              GenerationParams(max_tokens=24, constraint=Constraint('json_schema', schema)))\n"
        "print(json.dumps({'text': g.text, 'transformers': 'transformers' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["transformers"] is False
    assert json.loads(result["text"])["city"]  # valid under the grammar, mapped from ChatTokenizer


def test_encode_chat_takes_either_tokenizer(chat_tokenizer):
    from agenttrace.generation.local import encode_chat

    ids = encode_chat(chat_tokenizer, [Message(role="user", content="hello")])
    assert ids[-3:] == chat_tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)[-3:]
