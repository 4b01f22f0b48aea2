"""How llama.cpp's passes run for one model, decided once per library, model file, thread count
and CPU, before the first token: the KV cache's type and the threads of one-token steps and of
verify passes, on which a verify pass gives each position a one-token step's bits (greedy
speculation is lossless only then). The probe's answer is kept in agenttrace's cache, so every
process and arm takes the same path, however busy the machine is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

__all__ = ["KV_TYPES", "PROBE_CONTEXT", "KernelPath", "decision_key", "kernels", "library_version", "probe"]

# The probe's context: past 256 cells llama.cpp's one-token steps on two threads over an f16 cache
# take another attention path, whose bits differ from batched rows' here (on 1-255 cells they agree)
PROBE_CONTEXT = 320
# KV cache types the probe tries (ggml's type ids) and bytes per value (q8_0: 32 values in 34
# bytes). f16 is llama.cpp's default; one-token steps over a q8_0 cache take another attention
# path, whose bits equal batched rows' on every thread here
KV_TYPES = {"f16": (1, 2.0), "q8_0": (8, 34 / 32)}


class KernelPath(NamedTuple):
    """How a model's passes run (`kernels`)."""

    kv_cache: str  # a KV_TYPES key
    step_threads: int  # one-token steps
    verify_threads: int  # passes of several tokens (verify passes, chunks after a cached prefix)
    lossless: bool  # verify rows have a one-token step's bits on this path


def kernels(path: Path, threads: int, context: Callable[[KernelPath], object]) -> KernelPath:
    """The kernel path of the model file `path` on `threads`; `context(path)` makes a small
    context of the model that runs on that path (a llama_backend.LlamaCppModel) for the probe.

    On this project's CPU llama.cpp's prebuilt build gives verify rows a step's bits on one thread;
    on two, once the context passes 256 tokens, one-token steps over an f16 cache take another
    attention path (rows came out up to 0.8 in logits away), while over a q8_0 cache they keep
    batched rows' bits, and batched rows on two threads keep one thread's. So the probe takes the
    first of: an f16 cache with every pass on `threads`; a q8_0 cache so (as close to the fp32
    model as f16's: top-1 agreement 0.993 against 0.994 over 712 positions, measured); an f16
    cache with steps on one thread and verify passes on `threads`, or on one. Prompts prefill on
    every thread (that pass is the same for every arm). The probe (a 320-token prefill and a few
    steps per cache type, 2-4 s) runs once; its answer is kept in agenttrace's cache."""
    from agenttrace.generation.cache import read_json, write_json

    lib = library_version()
    key = decision_key(path, threads)
    known = read_json("llama-kernels.json") if lib else {}
    if len(known.get(key, ())) != 4:  # not probed, or by a version that decided less
        known[key] = list(probe(threads, context))
        if lib:  # (a read-only cache: the next process probes again)
            write_json("llama-kernels.json", known)
    kv, step, verify, lossless = known[key]
    return KernelPath(str(kv), int(step), int(verify), bool(lossless))


def probe(threads: int, context: Callable[[KernelPath], object]) -> KernelPath:
    """The first kernel path of `kernels`' order on which verify rows have a step's bits."""
    tries = [("f16", [(threads, threads)])]
    if threads > 1:
        tries += [("q8_0", [(threads, threads)]), ("f16", [(1, threads), (1, 1)])]
    for kv, candidates in tries:
        model = context(KernelPath(kv, threads, threads, False))
        try:
            found = _agreeing(model, candidates)
        finally:
            model.close()
        if found:
            return KernelPath(kv, *found, True)
    return KernelPath("f16", threads, threads, False)


def _agreeing(model, candidates: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The first (step threads, verify threads) of `candidates` on which batched passes of 2 and 8
    rows give each row the bits of a one-token step, after a context of PROBE_CONTEXT tokens
    (prefilled once, on every thread); None when none does."""
    context = min(PROBE_CONTEXT, model.n_ctx - 16)
    cache = model.new_cache(context + 16)
    model.prefill(list(range(100, 100 + context)), cache)
    base, draft, steps = cache.length, list(range(300, 308)), {}
    for step, verify in candidates:
        if step not in steps:
            model._use_threads(step)
            steps[step] = [model._decode([t], cache, False)[0] for t in draft]
            cache.crop(base)
        model._use_threads(verify)
        rows = []
        for width in (2, len(draft)):
            rows.append(model._decode(draft[:width], cache, False))
            cache.crop(base)
        if all(torch.equal(batch[i], steps[step][i]) for batch in rows for i in range(len(batch))):
            return step, verify
    return None


def decision_key(path: Path, threads: int) -> str:
    """What a decision measured on llama.cpp (the kernel path, the weights) holds for: the library's
    build, the file, the thread count and the CPU."""
    import platform

    from agenttrace.generation.ceiling import cpu_name

    return f"{library_version()}|{path.name}|{path.stat().st_size}|{threads}|{platform.machine()}|{cpu_name()}"


def library_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("llama-cpp-py-sync")
    except Exception:  # noqa: BLE001  (a copy without metadata: probe, keep nothing)
        return None
