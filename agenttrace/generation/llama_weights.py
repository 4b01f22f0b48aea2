"""Which copy of a GGUF's weights llama.cpp's CPU kernels run: the file as given, or its Q8_0
requantization, chosen by measurement once per file, library, thread count and CPU.

Why: llama.cpp's CPU build has fast matrix-matrix paths (repacked tiles) for some weight types
and not for others. On this project's 2-core EPYC the bundled Q4_1 file prefilled 300 tokens in
2.1 s on one thread where a Q8_0 copy took 1.0 s, and stepped at 70 against 80 tokens/s
(BENCHMARKS.md, scripts/llama_probe.py). Q8_0 keeps 8 bits per weight with a scale per 32: made
from a 4- or 5-bit file it adds an error about an eighth of the file's own quantization step, so
the model is the file's model (greedy text can still part at a near-tie: the bits differ). A
lossier type (Q4_0, faster still here) is never chosen for the user.

`gguf_weights` ("auto", "file" or "q8_0"): auto measures a 256-token prefill and 32 one-token steps
on each copy, A B B A (about 10 s once, with the copy written), keeps the faster, and remembers the answer in the cache, so every process
(and every arm of one) loads the same weights.
"""

from __future__ import annotations

import os
from pathlib import Path

from agenttrace.clock import default_clock
from agenttrace.errors import ModelUnavailable

__all__ = ["CHOICES", "Q8_0", "choose_weights", "requantized"]

CHOICES = ("auto", "file", "q8_0")
Q8_0 = 7  # llama_ftype MOSTLY_Q8_0
_PROBE_PROMPT = 256
_PROBE_STEPS = 32


def requantized(gguf: Path, cache: Path) -> Path:
    """`gguf` requantized to Q8_0 by llama.cpp's own quantizer, written once into `cache` (2.4 s
    for the bundled 135M model here) and reused."""
    from agenttrace.generation.llama_lib import open_library, quiet_logs

    st = gguf.stat()
    out = cache / "gguf" / f"{gguf.stem}-{st.st_size}.Q8_0.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    ffi, lib = open_library()
    quiet_logs(ffi, lib)  # (the quantizer writes a line per tensor)
    params = ffi.new("llama_model_quantize_params *", lib.llama_model_quantize_default_params())
    params.ftype, params.allow_requantize, params.nthread = Q8_0, True, os.cpu_count() or 1
    if lib.llama_model_quantize(str(gguf).encode(), str(tmp).encode(), params) != 0:
        tmp.unlink(missing_ok=True)
        raise ModelUnavailable(f"llama.cpp could not requantize {gguf.name} to Q8_0; load it with gguf_weights='file'")
    tmp.replace(out)
    return out


def _cost_s(model) -> float:
    """Seconds of a _PROBE_PROMPT-token prefill plus _PROBE_STEPS one-token steps."""
    clock = default_clock()
    cache = model.new_cache(_PROBE_PROMPT + _PROBE_STEPS + 1)
    t0 = clock.now_ns()
    model.prefill(list(range(100, 100 + _PROBE_PROMPT)), cache)
    for t in range(_PROBE_STEPS):
        model.forward([200 + t], cache, last_only=True)
    return (clock.now_ns() - t0) / 1e9


def choose_weights(gguf: Path, threads: int, choice: str, cache: Path) -> tuple[Path, str]:
    """The file to map and what it is ("file" or "q8_0"), for `choice` (see the module docstring)."""
    if choice not in CHOICES:
        raise ValueError(f"unknown gguf_weights {choice!r}; choose from {', '.join(CHOICES)}")
    if choice == "file":
        return gguf, "file"
    if choice == "q8_0":
        return requantized(gguf, cache), "q8_0"
    from agenttrace.generation.cache import read_json, write_json
    from agenttrace.generation.llama_backend import LlamaCppModel
    from agenttrace.generation.llama_kernels import decision_key, library_version

    lib = library_version()
    key = decision_key(gguf, threads)
    known = read_json("llama-weights.json") if lib else {}
    if key not in known:
        q8 = requantized(gguf, cache)
        models = {"file": LlamaCppModel(gguf, threads=threads, n_ctx=1024),
                  "q8_0": LlamaCppModel(q8, threads=threads, n_ctx=1024)}
        # (the weights are paged in already: each model's kernel probe ran passes on them)
        costs = {name: 0.0 for name in models}
        for name in ("file", "q8_0", "q8_0", "file"):  # interleaved: the machine's drift cancels
            costs[name] += _cost_s(models[name])
        for m in models.values():
            m.close()
        known[key] = {"weights": min(costs, key=costs.get), "cost_s": {k: round(v / 2, 4) for k, v in costs.items()}}
        if lib:  # (a read-only cache: the next process measures again)
            write_json("llama-weights.json", known)
    picked = known[key]["weights"]
    return (requantized(gguf, cache), "q8_0") if picked == "q8_0" else (gguf, "file")
