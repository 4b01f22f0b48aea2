"""A chat model's tokenizer without transformers: the Rust `tokenizers` model from a saved
`tokenizer.json` and the chat template rendered by jinja2, as transformers renders it.

Why: a fresh process spent 2.4 s importing transformers and 1.0 s building its tokenizer before
the first token (issue 33's cold start), though the work itself (split, merge, render a template)
takes milliseconds. A GGUF carries its vocabulary, merges and chat template; transformers' GGUF
reader turns them into a `tokenizer.json` once (`tokenizer_folder`), kept in the cache beside the
llama.cpp library copy, and every later process reads that file in ~0.2 s.

`ChatTokenizer` offers what our loop, the runtime and llguidance read from a tokenizer:
`apply_chat_template`, calling it for `input_ids`, `decode`, `eos_token_id`, `len()` and
`backend_tokenizer`; tests/generation/test_chat_tokenizer.py checks it gives transformers' ids
and text on the bundled model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from agenttrace.errors import ModelUnavailable

__all__ = ["ChatTokenizer", "tokenizer_folder"]

_log = logging.getLogger(__name__)
_FILES = ("tokenizer.json", "tokenizer_config.json")
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _template_environment():
    """jinja2 set up as transformers sets it up for chat templates (sandboxed, trimmed blocks,
    loop controls, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text): a
    template then renders the same text under either."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTokenizer:
    """A saved tokenizer folder's `tokenizer.json` and chat template, read without transformers."""

    def __init__(self, backend: Any, chat_template: str | None, special: Mapping[str, str | None]) -> None:
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self._special = {k: v for k, v in special.items() if v is not None}
        self._template = None
        self.eos_token = self._special.get("eos_token")
        self.bos_token = self._special.get("bos_token")
        self.eos_token_id = backend.token_to_id(self.eos_token) if self.eos_token else None
        self.bos_token_id = backend.token_to_id(self.bos_token) if self.bos_token else None

    @classmethod
    def from_folder(cls, folder: str | Path) -> ChatTokenizer:
        """The tokenizer saved in `folder` (by transformers' `save_pretrained`): ModelUnavailable,
        naming the file, when it has no `tokenizer.json` (a slow-only tokenizer: load it with
        transformers instead)."""
        from tokenizers import Tokenizer

        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ModelUnavailable(f"{path} does not exist: this tokenizer needs transformers to load "
                                   "(AutoTokenizer.from_pretrained); only a fast tokenizer's file loads without it")
        try:
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        template = config.get("chat_template")
        jinja = folder / "chat_template.jinja"  # where transformers 5 saves it
        if jinja.is_file():
            template = jinja.read_text(encoding="utf-8")
        return cls(Tokenizer.from_file(str(path)), template if isinstance(template, str) else None,
                   {k: _token_text(config.get(k)) for k in _SPECIAL})

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, conversation: Sequence[Mapping[str, Any]], *, tokenize: bool = True,
                            add_generation_prompt: bool = False, tools: list[dict] | None = None,
                            **kwargs: Any) -> str | list[int]:
        """The conversation rendered by the chat template (ids when `tokenize`, as transformers:
        the rendered text's tokens, no special tokens added)."""
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template: give the model's folder one (chat_template.jinja)")
        if self._template is None:  # compiled once: rendering is then ~0.1 ms a call
            self._template = _template_environment().from_string(self.chat_template)
        text = self._template.render(messages=[dict(m) for m in conversation], tools=tools, documents=None,
                                     add_generation_prompt=add_generation_prompt, **self._special, **kwargs)
        return self.encode(text, add_special_tokens=False) if tokenize else text


def cached_tokenizer_folder(gguf: Path, cache: Path) -> Path:
    """Where `tokenizer_folder` keeps the tokenizer of `gguf` (it may not exist yet)."""
    st = gguf.stat()
    return cache / "tokenizers" / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}"


def tokenizer_folder(gguf: Path, cache: Path) -> Path:
    """A folder under `cache` with the tokenizer of `gguf` saved as `tokenizer.json` (and its
    chat template), made once through transformers' GGUF reader (a few seconds) and read by
    `ChatTokenizer.from_folder` after. Keyed by the file's name, size and mtime."""
    folder = cached_tokenizer_folder(gguf, cache)
    if all((folder / f).is_file() for f in _FILES):
        return folder
    _log.info("writing the tokenizer of %s into %s (once)", gguf.name, folder)
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # transformers' GGUF reader refuses the file or its tokenizer type
        raise ModelUnavailable(f"cannot read the tokenizer of {gguf} ({type(exc).__name__}: {exc}); "
                               "give the model as a folder with tokenizer.json instead") from exc
    from agenttrace.generation.weights import write_folder_atomically

    try:
        write_folder_atomically(folder, lambda tmp: tokenizer.save_pretrained(tmp), "tokenizer.json")
    except OSError as exc:
        raise ModelUnavailable(f"cannot write the tokenizer into {folder} ({exc}); set AGENTTRACE_CACHE_DIR to a "
                               "writable folder") from exc
    return folder
