"""Generation on llama.cpp's kernels: a GGUF model that our loop runs the way it runs a compiled
model (kv.Stepper), so every drafter that needs only tokens (prompt lookup, a draft model), the
adaptive k, the fallback, grammar constraints and tracing work on it unchanged: a verify pass is
one `llama_decode` of the pending token and the draft with every position's logits, and rejected
tokens leave the KV cache through `llama_memory_seq_rm`.

A `LlamaCppModel` is the mapped weights and one llama.cpp context: each KV cache is a sequence
of it (up to SEQUENCES at once, in one unified cache of `n_ctx` cells), and passes take the
context's lock. Which cells a sequence gets, and so the order attention sums them in, depends on
what else the context holds: two arms sharing one context gave greedy texts that differed with
the other arm's history. So every `LocalChatModel` runs on a `fork()` of its own (the weights
stay mapped once), and what one generates never depends on another's calls or timing. A prefix cache keeps finished
generations' sequences and starts a call from the longest common prefix by copying those cells'
membership into a fresh sequence (`llama_memory_seq_cp` on a unified cache: no data copied, and
the kept sequence is never written again). The target's features, which the EAGLE and Medusa
heads read, are llama.cpp's embeddings output (the last layer's hidden state after the final norm),
switched on for the passes that read them. Not here: draft trees (a tree pass needs its own
attention mask) and the continuous-batching engine (it batches torch forwards).
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from agenttrace.errors import ModelUnavailable
from agenttrace.generation.llama_kernels import KV_TYPES, PROBE_CONTEXT, KernelPath, kernels, library_version
from agenttrace.generation.llama_lib import open_library, quiet_logs

# Sequences one context holds at once: its running generations and the finished ones its prefix
# cache keeps. They cost nothing apart: the cells are what is bounded (max_kept_bytes).
SEQUENCES = 32
N_BATCH = 512  # tokens per llama_decode at most (a longer prompt is prefilled in chunks)


class LlamaCache:
    """One generation's KV cache: a sequence of the model's llama.cpp context, as long as the
    tokens passed so far. crop / get_seq_length are what kv.crop asks of a cache."""

    def __init__(self, model: LlamaCppModel, seq: int) -> None:
        self.model, self.seq, self.length = model, seq, 0
        self._release = weakref.finalize(self, model._release, seq)

    def get_seq_length(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """The bytes of KV cache this sequence's cells hold (shared cells counted for each)."""
        return self.length * self.model.kv_bytes_per_token

    @property
    def max_kept_bytes(self) -> int:
        """What a prefix cache may keep of this model's context: half its cells, so the calls
        running beside the kept sequences find room."""
        return self.model.n_ctx // 2 * self.model.kv_bytes_per_token

    def save(self, path: Path, tokens: list[int]) -> None:
        """Write the first len(tokens) positions (which hold `tokens`) as llama.cpp's sequence
        state file (prompt_store.py)."""
        part = self.share(len(tokens))
        if part.length != len(tokens):
            raise ValueError(f"the cache holds {self.length} tokens, not the {len(tokens)} to save")
        self.model._save(part.seq, path, tokens)

    def load(self, path: Path, tokens: list[int]) -> None:
        """Fill this (empty) cache from a state file `save` wrote for `tokens`: ValueError when
        it does not load or holds other tokens (the cache is left empty)."""
        if self.length:
            raise ValueError("a state file loads into an empty cache")
        self.length = self.model._load(self.seq, path, tokens)

    def keep(self) -> None:
        """Mark this cache as kept for reuse (a prefix cache's entry): when a call finds no free
        cell, the model takes the oldest kept cache's cells back (its length drops to 0) rather
        than fail the call."""
        self.model._kept.append(weakref.ref(self))

    def share(self, length: int, tokens: int = 0) -> LlamaCache:
        """A new cache holding this one's first `length` tokens, sharing their cells (for a prefix
        cache: this one is kept as it is and never decoded into again)."""
        fresh = self.model.new_cache(tokens)
        self.model._copy(self.seq, fresh.seq, min(length, self.length))
        fresh.length = min(length, self.length)
        return fresh

    def crop(self, length: int) -> None:
        """Keep the first `length` tokens; a negative `length` removes that many from the end
        (transformers' convention, which kv.crop uses)."""
        keep = self.length + length if length < 0 else min(length, self.length)
        if keep < self.length:
            self.model._remove(self.seq, keep)
            self.length = keep


class LlamaCppModel:
    """A GGUF model on llama.cpp's CPU kernels (llama-cpp-py-sync's prebuilt library), as a
    kv.Stepper. `threads`: llama.cpp's threads (default: torch's intra-op count, so a comparison
    with a torch arm gives both the same cores); prompts prefill on all of them, one-token steps on
    `step_threads` and passes of several tokens (verify passes) on `verify_threads` (llama_kernels
    decides both, once: threads on which a verify pass gives each position a one-token step's bits;
    `lossless` False when none did)."""

    provider_name = "llama.cpp"
    native = True  # runs its passes and keeps its KV cache in its own library (LocalChatModel reads it)

    def __init__(self, gguf: str | Path, *, threads: int | None = None, n_ctx: int = 8192,
                 tables_from: str | Path | None = None, _weights: _Weights | None = None,
                 _path: KernelPath | None = None) -> None:
        self.ffi, self.lib = open_library()
        ffi, lib = self.ffi, self.lib
        path = Path(gguf)
        self.path, self.threads = path, default_threads(threads)
        # the GGUF whose embedding and output tables draft heads read (get_input_embeddings): the
        # file a Q8_0 copy was made from, whose tables the heads were trained against
        self.tables_from = Path(tables_from) if tables_from is not None else path
        self._weights = _weights or _Weights(lib, ffi, path)
        self._model = self._weights.model
        # decided once, before the first token, the same for every arm on this model (llama_kernels);
        # `_path` is the probe's own context
        if _path is None:
            if self.threads not in self._weights.kernels:
                self._weights.kernels[self.threads] = kernels(path, self.threads, self.probe_context)
            _path = self._weights.kernels[self.threads]
        self.kernel_path = _path
        self.kv_cache, self.step_threads, self.verify_threads, self.lossless = _path
        trained = int(lib.llama_model_n_ctx_train(self._model))
        ctx = lib.llama_context_default_params()
        ctx.n_ctx = min(n_ctx, trained) if trained > 0 else n_ctx
        ctx.n_batch = ctx.n_ubatch = N_BATCH
        ctx.n_seq_max = SEQUENCES
        ctx.kv_unified = True  # the sequences share the context's cells, as many as each needs
        ctx.n_threads = ctx.n_threads_batch = self.threads
        ctx.embeddings = False
        kv_type, kv_bytes = KV_TYPES[self.kv_cache]
        ctx.type_k = ctx.type_v = kv_type
        self._ctx = lib.llama_init_from_model(self._model, ctx)
        if self._ctx == ffi.NULL:
            raise ModelUnavailable(f"llama.cpp could not make a context for {path} ({ctx.n_ctx} tokens)")
        self._memory = lib.llama_get_memory(self._ctx)
        vocab = lib.llama_model_get_vocab(self._model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(vocab))
        self.n_ctx = int(lib.llama_n_ctx(self._ctx))
        heads, kv_heads = int(lib.llama_model_n_head(self._model)), int(lib.llama_model_n_head_kv(self._model))
        # keys and values of the cache's type for every layer's kv heads
        self.kv_bytes_per_token = int(int(lib.llama_model_n_layer(self._model)) * 2 * kv_heads
                                      * (int(lib.llama_model_n_embd(self._model)) // max(heads, 1)) * kv_bytes)
        self.n_batch = int(lib.llama_n_batch(self._ctx))  # llama.cpp lowers it to a small context's size
        self._batch = lib.llama_batch_init(N_BATCH, 0, 1)
        self._lock = threading.Lock()
        self._free = list(range(SEQUENCES))
        self._kept: list[weakref.ref[LlamaCache]] = []  # LlamaCache.keep, oldest first
        eos = {int(lib.llama_vocab_eos(vocab)), int(lib.llama_vocab_eot(vocab))} - {-1}
        # what LocalChatModel (and a draft head's fingerprint) reads of a transformers model
        arch = ffi.new("char[]", 64)
        lib.llama_model_meta_val_str(self._model, b"general.architecture", arch, 64)
        self.config = SimpleNamespace(_name_or_path=f"{path.name} (llama.cpp)", vocab_size=self.vocab_size,
                                      max_position_embeddings=self.n_ctx, model_type=ffi.string(arch).decode(),
                                      hidden_size=int(lib.llama_model_n_embd(self._model)),
                                      num_hidden_layers=int(lib.llama_model_n_layer(self._model)))
        self.generation_config = SimpleNamespace(eos_token_id=sorted(eos))
        self.device = torch.device("cpu")
        self._closed = weakref.finalize(self, _free_context, lib, self._batch, self._ctx)
        self._current = self.threads
        self._claimed = False

    def probe_context(self, path: KernelPath) -> LlamaCppModel:
        """A small context of this model's weights running on `path` (llama_kernels' probe)."""
        return LlamaCppModel(self.path, threads=self.threads, n_ctx=PROBE_CONTEXT + 32, tables_from=self.tables_from,
                             _weights=self._weights, _path=path)

    def own_context(self) -> LlamaCppModel:
        """This model for the first caller that asks, a `fork()` for every later one: each chat
        model on it gets a context no other writes into."""
        with self._lock:
            if not self._claimed:
                self._claimed = True
                return self
        return self.fork()

    def fork(self) -> LlamaCppModel:
        """A model on the same mapped weights with a context (KV cells) of its own, running the
        same kernel path: what it generates cannot depend on this one's calls."""
        return LlamaCppModel(self.path, threads=self.threads, n_ctx=self.n_ctx, tables_from=self.tables_from,
                             _weights=self._weights)

    # -- kv.Stepper ------------------------------------------------------------------------
    def new_cache(self, tokens: int) -> LlamaCache:
        if tokens > self.n_ctx:
            raise ValueError(f"a call of {tokens} tokens does not fit llama.cpp's context of {self.n_ctx}")
        with self._lock:
            if not self._free:
                raise RuntimeError(f"{SEQUENCES} generations already hold this llama.cpp model: one must end first")
            seq = self._free.pop()
            self.lib.llama_memory_seq_rm(self._memory, seq, -1, -1)
        return LlamaCache(self, seq)

    def forward(self, ids: list[int], cache: LlamaCache, last_only: bool = False) -> torch.Tensor:
        """`ids` after the cached tokens; float logits [n, vocab] (the last row with `last_only`)."""
        if len(ids) > self.n_batch:  # llama.cpp would abort the process
            raise ValueError(f"a pass of {len(ids)} tokens: llama.cpp takes at most {self.n_batch} at once "
                             "(prefill chunks them)")
        with self._lock:
            self._use_threads(self._round_threads(len(ids)))
            return self._decode(ids, cache, last_only)

    def prefill(self, ids: list[int], cache: LlamaCache) -> torch.Tensor:
        """The prompt in chunks of N_BATCH; logits of its last position, [1, vocab]."""
        if not ids:
            raise ValueError("a prefill of no tokens: the loop passes at least the prompt's last one")
        chunks = [ids[i : i + self.n_batch] for i in range(0, len(ids), self.n_batch)]
        with self._lock:
            self._use_threads(self.threads)  # a prompt's pass is the same for every arm: all threads
            for chunk in chunks[:-1]:
                self._decode(chunk, cache, True, outputs=False)
            return self._decode(chunks[-1], cache, True)

    def forward_features(self, ids: list[int], cache: LlamaCache, last_only: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` (a prompt longer than a pass in chunks, as `prefill`), also returning the
        target's features [n, d]: the last layer's hidden state after the final norm, what the
        output table multiplies (llama.cpp's embeddings output without pooling), which draft heads
        read. Every row is an output then, so the output layer runs on every row."""
        chunks = [ids[i : i + self.n_batch] for i in range(0, len(ids), self.n_batch)]
        if not last_only and len(chunks) > 1:
            raise ValueError(f"a pass of {len(ids)} tokens: llama.cpp takes at most {self.n_batch} at once")
        hidden, logits = [], None
        with self._lock:
            # a prompt's pass on every thread, as `prefill`; a round's as `forward`
            self._use_threads(self.threads if last_only else self._round_threads(len(ids)))
            self.lib.llama_set_embeddings(self._ctx, True)
            try:
                for chunk in chunks:
                    logits = self._decode(chunk, cache, False)
                    hidden.append(self._rows(self.lib.llama_get_embeddings(self._ctx), len(chunk),
                                             self.config.hidden_size))
            finally:
                self.lib.llama_set_embeddings(self._ctx, False)
        return (logits[-1:] if last_only else logits), torch.cat(hidden)

    def get_input_embeddings(self) -> SimpleNamespace:
        """The embedding table [vocab, d] as float32 (`tables_from`'s, dequantized once into the cache)."""
        return SimpleNamespace(weight=self._table("embedding"))

    def get_output_embeddings(self) -> SimpleNamespace | None:
        """The output table [vocab, d], or None when the model ties it to the embedding."""
        table = self._table("output")
        return SimpleNamespace(weight=table) if table is not None else None

    def _table(self, name: str) -> torch.Tensor | None:
        if self._weights.tables is None:
            from agenttrace.generation.cache import cache_dir
            from agenttrace.generation.gguf_tables import tables

            self._weights.tables = {k: torch.from_numpy(v) for k, v in tables(self.tables_from, cache_dir()).items()}
        return self._weights.tables.get(name)

    # -- the context ------------------------------------------------------------------------
    def _decode(self, ids: list[int], cache: LlamaCache, last_only: bool, outputs: bool = True) -> torch.Tensor:
        b, n, base = self._batch, len(ids), cache.length
        if base + n > self.n_ctx:
            raise ValueError(f"{base + n} tokens do not fit llama.cpp's context of {self.n_ctx}")
        b.n_tokens = n
        for i, token in enumerate(ids):
            b.token[i] = token
            b.pos[i] = base + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = cache.seq
            b.logits[i] = outputs and (not last_only or i == n - 1)
        status = self.lib.llama_decode(self._ctx, b)
        while status == 1 and self._evict_kept(cache):  # 1: no KV cell free for the batch
            status = self.lib.llama_decode(self._ctx, b)
        if status != 0:  # < 0: an error
            self.lib.llama_memory_seq_rm(self._memory, cache.seq, base, -1)
            raise RuntimeError(f"llama_decode failed ({status}) on {n} token(s) after {base}"
                               + (": no free KV cell in the context, nothing kept left to give back; use a larger n_ctx"
                                  if status == 1 else ""))
        cache.length = base + n
        if not outputs:
            return torch.empty(0)
        rows = 1 if last_only else n
        logits = self.lib.llama_get_logits(self._ctx)
        return self._rows(logits, rows, self.vocab_size)

    def _evict_kept(self, calling: LlamaCache) -> bool:
        """Free the oldest kept cache's cells (not the calling one's); False when none is left.
        Called with the lock held."""
        while self._kept:
            kept = self._kept.pop(0)()
            if kept is not None and kept is not calling and kept.length:
                self.lib.llama_memory_seq_rm(self._memory, kept.seq, -1, -1)
                kept.length = 0
                return True
        return False

    def _rows(self, floats, rows: int, width: int) -> torch.Tensor:
        """A copy of llama.cpp's output buffer `floats` as a float tensor [rows, width]."""
        return torch.from_numpy(np.frombuffer(self.ffi.buffer(floats, rows * width * 4), dtype=np.float32)
                                .reshape(rows, width).copy())

    def _round_threads(self, tokens: int) -> int:
        """The threads of a round's pass of `tokens`: a one-token step's, or a verify pass's."""
        return self.step_threads if tokens == 1 else self.verify_threads

    def _use_threads(self, n: int) -> None:
        if n != self._current:
            self.lib.llama_set_n_threads(self._ctx, n, n)
            self._current = n

    def _remove(self, seq: int, keep: int) -> None:
        with self._lock:
            self.lib.llama_memory_seq_rm(self._memory, seq, keep, -1)

    @property
    def prompt_store_key(self) -> str:
        """What a saved sequence state is valid for: this file, the library's build and the
        kernel path (prefill threads, step threads), which decide the KV cache's bits."""
        st = self.path.stat()
        return (f"{self.path.stem}-{st.st_size}-{library_version()}-t{self.threads}-s{self.step_threads}"
                f"-v{self.verify_threads}-{self.kv_cache}")

    def _save(self, seq: int, path: Path, tokens: list[int]) -> None:
        ids = self.ffi.new("int32_t[]", tokens)
        with self._lock:
            written = self.lib.llama_state_seq_save_file(self._ctx, str(path).encode(), seq, ids, len(tokens))
        if written == 0:
            raise OSError(f"llama.cpp could not write {path}")

    def _load(self, seq: int, path: Path, tokens: list[int]) -> int:
        ids, count = self.ffi.new("int32_t[]", len(tokens)), self.ffi.new("size_t *")
        with self._lock:
            read = self.lib.llama_state_seq_load_file(self._ctx, str(path).encode(), seq, ids, len(tokens), count)
            if read == 0 or list(ids[0 : count[0]]) != list(tokens):
                self.lib.llama_memory_seq_rm(self._memory, seq, -1, -1)
                raise ValueError(f"{path.name} does not hold the state of these {len(tokens)} tokens for this model")
        return int(count[0])

    def _copy(self, source: int, target: int, length: int) -> None:
        with self._lock:
            self.lib.llama_memory_seq_cp(self._memory, source, target, 0, length)

    def _release(self, seq: int) -> None:
        if self._closed.alive:
            with self._lock:
                self.lib.llama_memory_seq_rm(self._memory, seq, -1, -1)
                self._free.append(seq)

    def close(self) -> None:
        """Free llama.cpp's context and model now (else when this object is collected)."""
        self._closed()

    def __repr__(self) -> str:
        return (f"LlamaCppModel({self.path.name}, threads={self.threads}, step_threads={self.step_threads}, "
                f"verify_threads={self.verify_threads}, kv_cache={self.kv_cache}, n_ctx={self.n_ctx})")


def default_threads(threads: int | None) -> int:
    """llama.cpp's threads when none are asked: torch's intra-op count, so a comparison with a
    torch arm gives both the same cores."""
    return threads or torch.get_num_threads() or os.cpu_count() or 1


class _Weights:
    """A GGUF model loaded (mapped, not copied) once for every context on it: freed when the
    last context's model object is gone."""

    def __init__(self, lib, ffi, path: Path) -> None:
        if not path.is_file():
            raise ModelUnavailable(f"no GGUF file at {path}")
        quiet_logs(ffi, lib)
        self.model = lib.llama_model_load_from_file(str(path).encode(), lib.llama_model_default_params())
        if self.model == ffi.NULL:
            raise ModelUnavailable(f"llama.cpp could not load {path} (not a GGUF model it knows?)")
        self.kernels: dict[int, KernelPath] = {}  # by thread count: the path of every context on them
        self.tables: dict[str, torch.Tensor] | None = None  # get_input_embeddings' (read when asked)
        weakref.finalize(self, lib.llama_model_free, self.model)


def _free_context(lib, batch, ctx) -> None:
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
