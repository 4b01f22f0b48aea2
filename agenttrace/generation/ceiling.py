"""The bandwidth ceiling of decoding: bytes a decode step reads, and this machine's peaks.

At batch 1 a decode step reads every weight once (plus the KV cache) and does about two FLOPs
per weight, far below what the cores could compute: its time is bounded below by bytes / memory
bandwidth. `decode_bytes` counts what a one-token step of a model reads from its modules (the
layers as stored: fp32, bf16, packed int8/int4 with their scales; only the row of the embedding
table it looks up, unless the table is also the output head) and the KV cache at a context length.
`machine_peaks` measures read bandwidth and fp32 matmul throughput at the current thread count
with a short probe (about a second), cached per CPU, thread count and torch version.

Torch is imported inside the functions: reports and exporters import this module's records only.
"""

from __future__ import annotations

import json
import logging
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.core.roofline import ModelShape
from agenttrace.generation.cache import write_json_at

_log = logging.getLogger(__name__)

__all__ = ["MachinePeaks", "StepBytes", "ceiling_tok_s", "decode_bytes", "machine_peaks", "model_shape"]

_PROBE_BYTES = 512 * 2**20  # well beyond any last-level cache, so the probe reads memory
_FORMAT = 1


@dataclass(frozen=True)
class MachinePeaks:
    device: str  # the CPU's model name (or the GPU's) and the thread count
    read_gb_s: float  # best of the probe's passes: summing a 512 MiB tensor
    matmul_gflop_s: float  # fp32 1024x1024 matrix products


@dataclass(frozen=True)
class StepBytes:
    weights: int  # weights and scales a one-token step reads
    kv_per_token: int  # KV cache bytes per context token (all layers, keys and values)

    def at(self, context_tokens: int) -> int:
        return self.weights + self.kv_per_token * context_tokens


def ceiling_tok_s(step: StepBytes, peaks: MachinePeaks, context_tokens: int) -> float:
    """The decode rate bandwidth allows: one step's bytes at the measured read bandwidth."""
    return peaks.read_gb_s * 1e9 / step.at(context_tokens)


def _tensor_bytes(module) -> int:
    skip = getattr(module, "PREFILL_ONLY", ())  # copies only long passes read (quantize.Int4Linear.nibbles)
    own = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
    return sum(t.numel() * t.element_size() for name, t in own if name not in skip)


def decode_bytes(model) -> StepBytes:
    """What a one-token decode step of `model` reads (see the module docstring). A prepacked
    copy (generation/packed.py) is counted once with its layer: a step reads one of the two."""
    from torch import nn

    from agenttrace.generation.packed import PackedLinear

    embed = model.get_input_embeddings()
    # Tied: some other module (the head, or the head inside a prepacked wrapper) holds the table.
    sharers = [m for m in model.modules() if m is not embed and getattr(m, "weight", None) is embed.weight]
    total = 0
    for m in model.modules():
        if isinstance(m, PackedLinear) or m in sharers:
            continue  # a step reads a packed layer's one copy (its inner layer); a sharer's table is counted with the embedding
        if m is embed:
            row = embed.weight[0]
            total += embed.weight.numel() * embed.weight.element_size() if sharers else row.numel() * row.element_size()
        elif isinstance(m, nn.Module):
            total += _tensor_bytes(m)
    config = model.config
    layers = config.num_hidden_layers
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_bytes = 2 * layers * heads * head_dim * embed.weight.element_size()
    buffers = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if "rotary" in n)
    return StepBytes(weights=total - buffers, kv_per_token=kv_bytes)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.machine())
    except OSError:
        return platform.processor() or platform.machine()


def _probe(device: str) -> tuple[float, float]:
    import torch

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    clock = default_clock()
    big = torch.ones(_PROBE_BYTES // 4, device=device)
    reads = []
    for _ in range(5):
        sync()
        t = clock.now_ns()
        big.sum()
        sync()
        reads.append(_PROBE_BYTES / elapsed_s(clock, t) / 1e9)
    a = torch.randn(1024, 1024, device=device)
    flops = []
    for _ in range(5):
        sync()
        t = clock.now_ns()
        a @ a
        sync()
        flops.append(2 * 1024**3 / elapsed_s(clock, t) / 1e9)
    del big
    return max(reads), max(flops)


def machine_peaks(cache: Path | None = None, device: str = "cpu", refresh: bool = False) -> MachinePeaks:
    """This machine's read bandwidth and matmul peak at torch's current thread count, from the
    cache under `cache` when measured before (`refresh` measures again)."""
    import torch

    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else f"{cpu_name()}, {torch.get_num_threads()} threads"
    key = f"{name}|torch {torch.__version__}"
    path = cache / "machine-peaks.json" if cache is not None else None
    known: dict = {}
    if path is not None and path.is_file():
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
    entry = known.get(key) if not refresh else None
    if isinstance(entry, dict) and entry.get("format") == _FORMAT:
        return MachinePeaks(entry["device"], entry["read_gb_s"], entry["matmul_gflop_s"])
    read, flops = _probe(device)
    peaks = MachinePeaks(name, read, flops)
    if path is not None:
        known[key] = {"format": _FORMAT, **asdict(peaks)}
        try:
            write_json_at(path, known)
        except OSError as exc:
            _log.info("could not cache the machine's peaks in %s: %s", path, exc)
    return peaks


def model_shape(model) -> ModelShape:
    """The shape of a transformers causal LM as loaded (its stored weights: fp32, bf16, int8/int4)."""
    from torch import nn

    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    params = 0
    for m in (layers.modules() if layers is not None else ()):
        n_in, n_out = getattr(m, "in_features", None), getattr(m, "out_features", None)
        if isinstance(n_in, int) and isinstance(n_out, int) and not isinstance(m, nn.Embedding):
            params += n_in * n_out  # logical multiply-adds per row, whatever the storage (int4 packs two per byte)
    step = decode_bytes(model)
    return ModelShape(config.num_hidden_layers, heads, head_dim, int(config.vocab_size), int(config.hidden_size),
                      params, step.weights, step.kv_per_token)
