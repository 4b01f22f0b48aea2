"""The compiled decode path against the eager one on the bundled model, outside the benchmark:
compile time per pass width, then the time of a decode step and of verify passes, eager and
compiled, at a 434-token context, and whether the logits are the same bits.

    .venv/bin/python scripts/compile_probe.py [fp32|bf16|int8|int4] [THREADS] [WIDTHS]

WIDTHS: comma-separated pass widths to compile and time (default 1,4,16).
"""
import sys
import time

import torch

from agenttrace.generation import kv
from agenttrace.generation.compiled import compiled_view
from agenttrace.generation.models import load_weights


def timed(fn, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    weights = sys.argv[1] if len(sys.argv) > 1 else "int4"
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    widths = [int(w) for w in (sys.argv[3] if len(sys.argv) > 3 else "1,4,16").split(",")]
    model = load_weights(weights).model
    comp = compiled_view(model)
    context = list(range(100, 534))
    with torch.inference_mode():
        for width in widths:
            start = time.perf_counter()
            comp.warm_up([len(context) + 64], [width])
            print(f"compile width {width}: {time.perf_counter() - start:.1f} s", flush=True)
        eager_cache, static = kv.new_cache(model), comp.new_cache(len(context) + 64)
        kv.forward(model, context, eager_cache, last_only=True)
        comp.forward(context, static, last_only=True)
        base = len(context)
        for width in widths:
            ids = [5] * width

            def eager_pass():
                kv.forward(model, ids, eager_cache)
                kv.crop(eager_cache, base)

            def compiled_pass():
                comp.forward(ids, static)
                kv.crop(static, base)

            e, c = timed(eager_pass, 5), timed(compiled_pass, 5)
            same = torch.equal(kv.forward(model, ids, eager_cache), comp.forward(ids, static))
            kv.crop(eager_cache, base)
            kv.crop(static, base)
            print(f"{weights} {width}-token pass: eager {e:.1f} ms, compiled {c:.1f} ms ({e / c:.2f}x); "
                  f"same logits as eager: {same}", flush=True)


if __name__ == "__main__":
    main()
