"""Generation on llama.cpp's kernels: a GGUF model that our loop runs the way it runs a compiled
model (kv.Stepper), so every drafter that needs only tokens (prompt lookup, a draft model), the
adaptive k, the fallback, grammar constraints and tracing work on it unchanged: a verify pass is
one `llama_decode` of the pending token and the draft with every position's logits, and rejected
tokens leave the KV cache through `llama_memory_seq_rm`.

One llama.cpp context serves every generation on the model: each KV cache is a sequence of it
(up to SEQUENCES at once, in one unified cache of `n_ctx` cells), and passes take the context's
lock, so sibling models (parallel sub-agents) interleave safely. Not here: the target's features
(EAGLE and Medusa heads read them; llama.cpp's embeddings output is the last layer's, normed,
which is what they read, but it is not wired yet), draft trees (a tree pass needs its own
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
from agenttrace.generation.llama_lib import open_library

SEQUENCES = 8  # generations one model holds at once (sibling models share its context)
N_BATCH = 512  # tokens per llama_decode at most (a longer prompt is prefilled in chunks)
# The probe's context (_kernels): past 256 cells llama.cpp's attention takes another path, whose
# batched rows on two threads differ from its one-token steps here (on 1-255 cells they agree)
PROBE_CONTEXT = 320


class LlamaCache:
    """One generation's KV cache: a sequence of the model's llama.cpp context, as long as the
    tokens passed so far. crop / get_seq_length are what kv.crop asks of a cache."""

    def __init__(self, model: LlamaCppModel, seq: int) -> None:
        self.model, self.seq, self.length = model, seq, 0
        self._release = weakref.finalize(self, model._release, seq)

    def get_seq_length(self) -> int:
        return self.length

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
    with a torch arm gives both the same cores); prompts prefill on all of them, steps and verify
    passes on `step_threads` (_kernels decides, once: the threads on which a verify pass gives each
    position a one-token step's bits; `lossless` False when none did)."""

    provider_name = "llama.cpp"

    def __init__(self, gguf: str | Path, *, threads: int | None = None, n_ctx: int = 8192) -> None:
        self.ffi, self.lib = open_library()
        ffi, lib = self.ffi, self.lib
        path = Path(gguf)
        if not path.is_file():
            raise ModelUnavailable(f"no GGUF file at {path}")
        self.threads = threads or torch.get_num_threads() or os.cpu_count() or 1
        lib.llama_log_set(_quiet(ffi), ffi.NULL)
        params = lib.llama_model_default_params()
        self._model = lib.llama_model_load_from_file(str(path).encode(), params)  # mapped, not copied
        if self._model == ffi.NULL:
            raise ModelUnavailable(f"llama.cpp could not load {path} (not a GGUF model it knows?)")
        trained = int(lib.llama_model_n_ctx_train(self._model))
        ctx = lib.llama_context_default_params()
        ctx.n_ctx = min(n_ctx, trained) if trained > 0 else n_ctx
        ctx.n_batch = ctx.n_ubatch = N_BATCH
        ctx.n_seq_max = SEQUENCES
        ctx.kv_unified = True  # the sequences share the context's cells, as many as each needs
        ctx.n_threads = ctx.n_threads_batch = self.threads
        ctx.embeddings = False
        self._ctx = lib.llama_init_from_model(self._model, ctx)
        if self._ctx == ffi.NULL:
            lib.llama_model_free(self._model)
            raise ModelUnavailable(f"llama.cpp could not make a context for {path} ({ctx.n_ctx} tokens)")
        self._memory = lib.llama_get_memory(self._ctx)
        vocab = lib.llama_model_get_vocab(self._model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(vocab))
        self.n_ctx = int(lib.llama_n_ctx(self._ctx))
        self.n_batch = int(lib.llama_n_batch(self._ctx))  # llama.cpp lowers it to a small context's size
        self._batch = lib.llama_batch_init(N_BATCH, 0, 1)
        self._lock = threading.Lock()
        self._free = list(range(SEQUENCES))
        eos = {int(lib.llama_vocab_eos(vocab)), int(lib.llama_vocab_eot(vocab))} - {-1}
        # what LocalChatModel reads of a transformers model
        self.config = SimpleNamespace(_name_or_path=f"{path.name} (llama.cpp)", vocab_size=self.vocab_size,
                                      max_position_embeddings=self.n_ctx)
        self.generation_config = SimpleNamespace(eos_token_id=sorted(eos))
        self.device = torch.device("cpu")
        self.path = path
        self._closed = weakref.finalize(self, _free_native, lib, self._batch, self._ctx, self._model)
        self._current = self.threads
        # decided once, before the first token, the same for every arm on this model (see _kernels)
        self.step_threads, self.lossless = _kernels(self)

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
            self._use_threads(self.step_threads)
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
        if status != 0:  # 1: no KV cell free for the batch; < 0: an error
            self.lib.llama_memory_seq_rm(self._memory, cache.seq, base, -1)
            raise RuntimeError(f"llama_decode failed ({status}) on {n} token(s) after {base}")
        cache.length = base + n
        if not outputs:
            return torch.empty(0)
        rows = 1 if last_only else n
        logits = self.lib.llama_get_logits(self._ctx)
        return torch.from_numpy(np.frombuffer(self.ffi.buffer(logits, rows * self.vocab_size * 4),
                                              dtype=np.float32).reshape(rows, self.vocab_size).copy())

    def _use_threads(self, n: int) -> None:
        if n != self._current:
            self.lib.llama_set_n_threads(self._ctx, n, n)
            self._current = n

    def _step_path(self) -> int | None:
        """The first of `threads`, 1 on which a batched pass gives each row the bits of a one-token
        step, after a context of PROBE_CONTEXT tokens (prefilled once, on every thread); None when
        neither does."""
        context = min(PROBE_CONTEXT, self.n_ctx - 16)
        cache = self.new_cache(context + 16)
        self.prefill(list(range(100, 100 + context)), cache)
        base, draft = cache.length, list(range(300, 308))
        for threads in dict.fromkeys((self.threads, 1)):
            self._use_threads(threads)
            steps = [self._decode([t], cache, False)[0] for t in draft]
            cache.crop(base)
            batch = self._decode(draft, cache, False)
            cache.crop(base)
            if all(torch.equal(batch[i], steps[i]) for i in range(len(draft))):
                return threads
        return None

    def _remove(self, seq: int, keep: int) -> None:
        with self._lock:
            self.lib.llama_memory_seq_rm(self._memory, seq, keep, -1)

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
                f"n_ctx={self.n_ctx})")


def _kernels(model: LlamaCppModel) -> tuple[int, bool]:
    """(threads for one-token steps and verify passes, whether verify rows then have a step's bits).

    Greedy speculation is lossless only when a verify pass gives each position the bits of a
    one-token step. On this project's CPU llama.cpp's prebuilt build does on one thread and does
    not on two once the context passes 256 tokens (batched rows came out up to 0.8 in logits away):
    so steps and verify passes run on `threads` where a probe finds the bits equal there, else on
    one thread where it finds them equal there (prompts still prefill on every thread: that pass
    is the same for every arm). The probe (a 320-token prefill and a few steps, about 1-2 s) runs
    once per library, model file, thread count and CPU; its answer is kept in agenttrace's cache,
    so every process and arm takes the same path, however busy the machine is."""
    import json
    import platform

    from agenttrace.generation.models import cache_dir

    try:
        from importlib.metadata import version

        lib = version("llama-cpp-py-sync")
    except Exception:  # noqa: BLE001  (a copy without metadata: probe, keep nothing)
        lib = None
    key = f"{lib}|{model.path.name}|{model.path.stat().st_size}|{model.threads}|{platform.machine()}|{_cpu_name()}"
    store = cache_dir() / "llama-kernels.json"
    try:
        known = json.loads(store.read_text()) if lib and store.is_file() else {}
    except (OSError, ValueError):
        known = {}
    if key not in known:
        threads = model._step_path()
        known[key] = [threads or model.threads, threads is not None]
        if lib:
            try:
                store.parent.mkdir(parents=True, exist_ok=True)
                tmp = store.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(known, indent=1))
                tmp.replace(store)
            except OSError:  # a read-only cache: the next process probes again
                pass
    threads, lossless = known[key]
    return int(threads), bool(lossless)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def _free_native(lib, batch, ctx, model) -> None:
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)


_LOG_CALLBACK = None


def _quiet(ffi):
    """A log callback that drops llama.cpp's load chatter (it writes hundreds of lines to stderr);
    kept alive for the process, as llama.cpp holds it."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:
        _LOG_CALLBACK = ffi.callback("void(enum ggml_log_level, const char *, void *)", lambda level, text, data: None)
    return _LOG_CALLBACK
