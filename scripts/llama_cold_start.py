"""Where a fresh process's time goes before the first generation on llama.cpp's kernels (issue
33's cold start): imports, the tokenizer (still transformers'), the mapped model, the chat model,
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


from agenttrace.generation.models import bundled_model_dir, find_bundled_gguf

mark("import agenttrace.generation.models")
from transformers import AutoTokenizer

mark("import transformers")
tok = AutoTokenizer.from_pretrained(bundled_model_dir(convert=False))
mark("tokenizer")
from agenttrace.generation.llama_backend import LlamaCppModel

model = LlamaCppModel(find_bundled_gguf(), threads=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
mark("llama.cpp model (mapped)")
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
