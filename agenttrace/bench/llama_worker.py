"""The llama.cpp side of the `llama_cpp` peer arms, run by the venv scripts/llama_cpp.sh builds
(`python llama_worker.py GGUF THREADS CONTEXT`). It imports only llama_cpp and the standard
library: agenttrace is not installed there.

One JSON request per stdin line, one JSON reply per stdout line:
    {"ids": [...], "budget": N, "stop": [...], "lookup": bool}
 -> {"tokens": [...], "e2e_s": ..., "decode_s": ..., "peak_rss_mb": ...}  or  {"error": "..."}
Times are taken here with perf_counter around llama.cpp's own calls, so the pipe is not counted.
The KV cache is reset before every request: each prompt is prefilled whole, as our arms do.
"""

import json
import sys
import time

from peak_rss import peak_rss_mib  # beside this file: the script's folder is on sys.path


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


def _without_extra_buffers() -> None:
    """Load models without llama.cpp's extra buffer types. On a CPU with AMX, a build from source
    (-march=native) puts Q4_1 weights in its AMX buffers, and in this project's VM the first
    forward pass then dies with SIGSEGV (the guest does not give the process AMX tile state).
    Without them the weights stay in plain CPU buffers and the AVX-512 kernels serve them. The
    bindings have no argument for it, so the default parameters they start from are changed."""
    import llama_cpp.llama as bindings

    defaults = bindings.llama_cpp.llama_model_default_params

    def params():
        p = defaults()
        p.use_extra_bufts = False
        return p

    bindings.llama_cpp.llama_model_default_params = params


def main() -> int:
    gguf, threads, context = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if _cpu_has_amx():
        _without_extra_buffers()
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    common = {"model_path": gguf, "n_threads": threads, "n_threads_batch": threads, "n_ctx": context, "verbose": False}
    models = {}  # made on first use: a run without the lookup arm holds one model, not two

    def model(lookup: bool):
        if lookup not in models:
            # the bindings' speculative path reads the logits of every drafted position
            extra = {"draft_model": LlamaPromptLookupDecoding(num_pred_tokens=10), "logits_all": True} if lookup else {}
            models[lookup] = Llama(**common, **extra)
        return models[lookup]

    model(False)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            llm = model(bool(req.get("lookup")))
            stop = set(req.get("stop") or ()) | {llm.token_eos()}
            llm.reset()
            out, first = [], None
            start = time.perf_counter()
            for tok in llm.generate(req["ids"], top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
                if first is None:
                    first = time.perf_counter()
                out.append(int(tok))
                if tok in stop or len(out) >= req["budget"]:
                    break
            end = time.perf_counter()
            rss = peak_rss_mib()
            reply = {"tokens": out, "e2e_s": end - start, "decode_s": end - (first or end), "peak_rss_mb": rss}
        except Exception as exc:  # one bad request is reported, the worker keeps serving
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
