"""A probe for the compiled-decode question of the quantized-weights issue, not part of the
library: one decode step (and a 4- and 5-token verify pass) of the bundled model in a weight
variant, eager and under `torch.compile(model, dynamic=True)` over transformers' dynamic KV cache,
at a 434-token context, with the compile times.

    .venv/bin/python scripts/compile_probe.py [fp32|int4|int8] [THREADS]
"""
import sys
import time

import torch

from agenttrace.generation import kv
from agenttrace.generation.models import load_weights


def main() -> None:
    weights = sys.argv[1] if len(sys.argv) > 1 else "int4"
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    model = load_weights(weights).model
    ids = list(range(100, 534))
    with torch.inference_mode():
        cache = kv.new_cache(model)
        kv.forward(model, ids, cache, last_only=True)
        t = time.perf_counter()
        for _ in range(10):
            kv.forward(model, [5], cache)
        print(f"{weights} eager decode step: {(time.perf_counter() - t) / 10 * 1e3:.1f} ms", flush=True)
        compiled = torch.compile(model, dynamic=True)
        for label, tokens in (("compile (first decode step)", [5]), ("second decode step", [5])):
            t = time.perf_counter()
            kv.forward(compiled, tokens, cache)
            print(f"{label}: {time.perf_counter() - t:.2f} s", flush=True)
        t = time.perf_counter()
        for _ in range(10):
            kv.forward(compiled, [5], cache)
        print(f"compiled decode step: {(time.perf_counter() - t) / 10 * 1e3:.1f} ms", flush=True)
        for n in (4, 5):
            t = time.perf_counter()
            kv.forward(compiled, [5] * n, cache)
            print(f"first {n}-token verify pass: {time.perf_counter() - t:.2f} s", flush=True)


if __name__ == "__main__":
    main()
