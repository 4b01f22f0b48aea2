"""Where a fresh process's time goes before the first generation on llama.cpp's kernels (issue
33's cold start): imports, load_model (the tokenizer without transformers, the mapped model), the chat model,
a 40-token greedy generation. Run it twice: the first run also makes the cached library copy and
the kernel probe (generation/llama_backend.py).

    python scripts/llama_cold_start.py THREADS
"""

import time

t0 = time.perf_counter()
import sys

marks = []


def mark(name: str) -> None:
    marks.append((name, time.perf_counter()))


from agenttrace.generation.models import load_model

mark("import agenttrace.generation.models")
loaded = load_model(backend="llama.cpp", threads=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
mark("load_model: tokenizer (no transformers) and mapped weights")
model, tok = loaded.model, loaded.tokenizer
from agenttrace import GenerationParams, LocalChatModel
from agenttrace.core.chat import Message

chat = LocalChatModel(model, tok)
mark("LocalChatModel (its imports)")
chat.chat([Message(role="user", content="What is the weather tool's argument for Paris?")], GenerationParams(max_tokens=40))
mark("first generation (40 tokens)")
prev = t0
for name, t in marks:
    print(f"{name:36s} {t - prev:6.2f} s  (at {t - t0:5.2f} s)")
    prev = t
