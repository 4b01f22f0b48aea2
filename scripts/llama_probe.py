"""What a pass costs on llama.cpp's kernels (generation/llama_backend.py), per weight type: the
bundled Q4_1 GGUF, and Q4_0 / Q8_0 requantized from it by llama.cpp's own quantizer (lossy: other
models). Prints, per type, a 300-token prefill, a one-token step, verify passes of 2, 4 and 8
tokens as multiples of a step, and whether each row of a verify pass has a one-token step's bits.
Best of 3 interleaved rounds.

    python scripts/llama_probe.py THREADS
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from agenttrace.generation.llama_backend import LlamaCppModel
from agenttrace.generation.llama_lib import open_library
from agenttrace.generation.models import find_bundled_gguf

_FTYPES = {"q4_0": 2, "q8_0": 7}  # llama_ftype


def requantize(src: Path, ftype: int, out: Path) -> Path:
    ffi, lib = open_library()
    params = ffi.new("llama_model_quantize_params *", lib.llama_model_quantize_default_params())
    params.ftype, params.allow_requantize, params.nthread = ftype, True, 2
    if lib.llama_model_quantize(str(src).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"llama_model_quantize failed for {out.name}")
    return out


def same_bits(model: LlamaCppModel, prompt: list[int], n: int) -> bool:
    cache = model.new_cache(len(prompt) + n + 1)
    model.prefill(prompt, cache)
    base = cache.length
    steps = [model.forward([t], cache)[0] for t in range(300, 300 + n)]
    cache.crop(base)
    batch = model.forward(list(range(300, 300 + n)), cache)
    return all(torch.equal(batch[i], steps[i]) for i in range(n))


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    src = find_bundled_gguf()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"q4_1": src, **{k: requantize(src, f, Path(tmp) / f"{k}.gguf") for k, f in _FTYPES.items()}}
        models = {k: LlamaCppModel(p, threads=threads, n_ctx=2048) for k, p in paths.items()}
        prompt = list(range(100, 400))
        res: dict[str, dict[str, list[float]]] = {k: {} for k in models}
        for _ in range(3):
            for k, m in models.items():
                cache = m.new_cache(600)
                t = time.perf_counter()
                m.prefill(prompt, cache)
                res[k].setdefault("prefill", []).append(time.perf_counter() - t)
                t = time.perf_counter()
                for j in range(16):
                    m.forward([200 + j], cache)
                res[k].setdefault("step", []).append((time.perf_counter() - t) / 16)
                for n in (2, 4, 8):
                    base = cache.length
                    t = time.perf_counter()
                    for _ in range(4):
                        m.forward(list(range(300, 300 + n)), cache)
                        cache.crop(base)
                    res[k].setdefault(f"v{n}", []).append((time.perf_counter() - t) / 4)
                del cache
        for k, r in res.items():
            step = min(r["step"])
            verify = ", ".join(f"verify {n}: {min(r[f'v{n}']) / step:.2f}x" for n in (2, 4, 8))
            bits = all(same_bits(models[k], prompt, n) for n in (2, 4, 8))
            print(f"{k} ({threads} thread(s)): prefill 300 tokens {min(r['prefill']) * 1000:.0f} ms, step "
                  f"{step * 1000:.1f} ms ({1 / step:.0f} tok/s), {verify}; verify rows = step bits: {bits}")


if __name__ == "__main__":
    main()
