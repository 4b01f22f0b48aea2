"""A probe, not part of the library: where one decode step of the bundled model goes, per weight
variant, with torch.profiler over five steps at a 434-token context (the agent prompt's length).

    .venv/bin/python scripts/step_profile.py [fp32|bf16|int8|int4] [THREADS]
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from agenttrace.generation import kv
from agenttrace.generation.models import load_weights


def main() -> None:
    weights = sys.argv[1] if len(sys.argv) > 1 else "int4"
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    model = load_weights(weights).model
    with torch.inference_mode():
        cache = kv.new_cache(model)
        kv.forward(model, list(range(100, 534)), cache, last_only=True)
        for _ in range(3):
            kv.forward(model, [5], cache)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                kv.forward(model, [5], cache)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
