"""The process `agenttrace bench generation` starts per weight variant to measure its peak RSS:
load the variant (from the cache; "gguf": the GGUF on llama.cpp's kernels), run one tool-call prompt with plain decoding and with prompt
lookup (what the variant's arms run, prepacked verify weights included), print the peak in MiB.

    python -m agenttrace.bench.rss_child WEIGHTS THREADS
"""

from __future__ import annotations

import sys


def measure_peak_rss_mb(weights: str, threads: int) -> float | None:
    """The peak RSS of a fresh process running `weights`' arms (bench/rss_child.py), or None when
    it failed (said on stderr: the table then shows "-")."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "agenttrace.bench.rss_child", weights, str(threads)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"peak RSS of {weights}: the child failed: {proc.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    weights, threads = argv[0], int(argv[1])
    import torch

    from agenttrace.bench.prompts import tool_call_prompts
    from agenttrace.core.chat import GenerationParams
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_weights

    torch.set_num_threads(threads)
    if weights in ("gguf", "gguf_q8"):  # our loop on llama.cpp's kernels over the GGUF itself, or its Q8_0 copy
        from agenttrace.generation.models import load_model

        loaded = load_model(backend="llama.cpp", threads=threads, gguf_weights="q8_0" if weights == "gguf_q8" else "file")
    else:
        loaded = load_weights(weights)
    params = GenerationParams(max_tokens=64)
    messages = tool_call_prompts()[0]
    LocalChatModel(loaded.model, loaded.tokenizer).chat(messages, params)
    LocalChatModel(loaded.model, loaded.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=16,
                   adaptive=True).chat(messages, params)
    from agenttrace.bench.peak_rss import peak_rss_mib

    print(peak_rss_mib())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
