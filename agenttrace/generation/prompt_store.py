"""Prompt prefixes kept on disk, so a fresh process does not prefill them again.

An agent's calls open with the same system prompt, tool schemas and examples in every task and
every process; on a CPU prefilling them is most of a cold start's first call (a 600-token prompt
took 4.5 s on llama.cpp's Q4_1 kernels, one thread, here). The in-memory prefix cache
(prefix_cache.py) helps only within one process. This store keeps, per model and kernel path,
the KV state of a prefix that two different conversations shared (what the system prompt is,
found without knowing the chat's structure) and of a chat's opening (what comes before its
request: system prompt, tools, examples; a chat model's first call puts it here, prefix_cache's
open_with), each written once, and a later process's first call starts from it.

Files: `<folder>/<sha1 of the tokens>.kv` (the backend's own state format: llama.cpp's sequence
state file) and `index.json` listing each file's tokens. Bounded in bytes, oldest out first;
written to a temporary name and renamed, so a reader never sees half a file; a file that does
not load is dropped from the index and the call prefills as it would have.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from agenttrace.generation import kv

__all__ = ["MIN_TOKENS", "PromptStore"]

_log = logging.getLogger(__name__)
MIN_TOKENS = 64  # a shorter shared prefix prefills in less time than a file takes to open


class PromptStore:
    """Shared prompt prefixes on disk for one model and kernel path (the caller's `folder`)."""

    def __init__(self, folder: str | Path, max_bytes: int = 256 * 2**20) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.loads = self.saves = 0

    @classmethod
    def for_model(cls, model) -> PromptStore | None:
        """The store in agenttrace's cache for `model`'s weights and kernel path (its
        `prompt_store_key`: a state file is only valid for the build, threads and model that wrote
        it), or None for a model whose caches cannot be saved (the torch backend's, for now)."""
        key = getattr(model, "prompt_store_key", None)
        if not isinstance(key, str):
            return None
        from agenttrace.generation.cache import cache_dir

        return cls(cache_dir() / "prompts" / key)

    # -- the index ------------------------------------------------------------------------------
    def _index(self) -> dict[str, list[int]]:
        try:
            index = json.loads((self.folder / "index.json").read_text())
        except (OSError, ValueError):
            return {}
        return index if isinstance(index, dict) else {}

    def _write_index(self, index: dict[str, list[int]]) -> None:
        tmp = self.folder / f".index.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(index))
        tmp.replace(self.folder / "index.json")

    def match(self, prompt: Sequence[int]) -> tuple[Path, int] | None:
        """The stored prefix of `prompt` with the most tokens (file, its token count), or None."""
        best = None
        for name, tokens in self._index().items():
            n = len(tokens)
            if n <= len(prompt) - 1 and (best is None or n > best[1]) and kv.common_prefix_length(tokens, prompt) == n:
                best = (self.folder / name, n)
        return best

    # -- loading and saving ---------------------------------------------------------------------
    def load(self, model, prompt: Sequence[int], tokens: int, longer_than: int = 0):
        """A new cache of `model` holding the longest stored prefix of `prompt`, and its length;
        None when no stored prefix is longer than `longer_than` (what memory already offers), or
        a stored file did not load (it leaves the index)."""
        found = self.match(prompt)
        if found is None or found[1] <= longer_than:
            return None
        path, n = found
        cache = kv.new_cache(model, tokens)
        try:
            cache.load(path, prompt[:n])
        except (OSError, ValueError) as exc:
            _log.info("prompt store: %s did not load (%s); prefilling instead", path.name, exc)
            self._forget(path.name)
            return None
        self.loads += 1
        return cache, n

    def save(self, cache, tokens: Sequence[int]) -> None:
        """Keep the first len(tokens) positions of `cache` (which holds at least those tokens)
        unless a stored file already covers them, or all but fewer than MIN_TOKENS of them (a
        system prompt kept alone, then the same with a user turn's opening); oldest files go past
        `max_bytes`."""
        tokens = list(tokens)
        if len(tokens) < MIN_TOKENS:
            return
        index = self._index()
        for t in index.values():
            covered = kv.common_prefix_length(t, tokens)
            if covered == len(tokens) or (covered == len(t) and len(tokens) - covered < MIN_TOKENS):
                return
        name = hashlib.sha1(json.dumps(tokens).encode()).hexdigest() + ".kv"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{name}.{os.getpid()}.tmp"
            cache.save(tmp, tokens)
            tmp.replace(self.folder / name)
            index = self._index()  # another process may have written meanwhile
            index.pop(name, None)
            index[name] = tokens  # newest last
            self._write_index(self._bounded(index))
        except (OSError, ValueError) as exc:  # a full or read-only disk: the store is an optimisation
            _log.info("prompt store: could not keep a %d-token prefix in %s: %s", len(tokens), self.folder, exc)
            return
        self.saves += 1

    def _bounded(self, index: dict[str, list[int]]) -> dict[str, list[int]]:
        """`index` (oldest first, as written) without the oldest files past `max_bytes`."""
        kept, total = {}, 0
        for name in reversed(index):
            try:
                size = (self.folder / name).stat().st_size
            except OSError:
                continue  # gone: another process evicted it
            if total + size > self.max_bytes and kept:
                (self.folder / name).unlink(missing_ok=True)
                continue
            kept[name], total = index[name], total + size
        return dict(reversed(kept.items()))

    def _forget(self, name: str) -> None:
        index = self._index()
        if index.pop(name, None) is not None:
            try:
                self._write_index(index)
                (self.folder / name).unlink(missing_ok=True)
            except OSError:
                pass
