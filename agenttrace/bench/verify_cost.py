"""`agenttrace bench verify-cost`: what verifying a draft costs on this device, and what that
allows speculation to gain. The forward pass our generator runs to verify k draft tokens scores
k + 1 tokens after a cached context; this measures its time for widths n = 1..64, on the bundled
model or on a random-weight model of a realistic size built on the device (no download: the
GPU machines have no network), and puts it on the device's roofline.

    relative cost  t(n) / t(1): near 1 while the pass is memory-bound (the weights are read once
                   whatever n is), growing once it becomes compute-bound
    roofline       achieved memory bandwidth at n = 1 (weight and KV bytes over t(1)) and achieved
                   FLOP/s at each n (2 x parameters x n), against the device's peaks when known
    speedup bound  for a free drafter (prompt lookup) with per-token acceptance alpha, drafting k
                   gives (1 - alpha^(k+1)) / (1 - alpha) tokens per pass of cost t(k+1) / t(1)
                   (core/costmodel.py with the measured verify cost): the best k and speedup
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agenttrace.core.costmodel import best_k_at_widths

# Llama-architecture shapes of public models, for random-weight runs.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 49152},
    "smollm2-135m": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152},
    "llama-1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "vocab_size": 128256},
    "llama-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "vocab_size": 128256},
}
# Dense peaks from the vendors' data sheets: (memory bytes/s, bf16 FLOP/s), matched by name.
PEAKS = {"H200": (4.8e12, 989e12), "H100": (3.35e12, 989e12), "A100": (2.0e12, 312e12), "L4": (0.3e12, 121e12)}
WIDTHS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
ALPHAS = (0.5, 0.7, 0.9)


@dataclass
class Point:
    n: int
    ms: float  # median over repeats
    relative: float  # t(n) / t(1)
    gflops: float  # achieved, 2 x parameters x n / t(n)


@dataclass
class Bound:
    alpha: float
    best_k: int
    speedup: float


@dataclass
class VerifyCost:
    model: str
    device: str
    dtype: str
    parameters: int
    context: int
    repeats: int
    points: list[Point] = field(default_factory=list)
    bandwidth_gb_s: float = 0.0  # achieved at n = 1
    peak_bandwidth_gb_s: float | None = None
    peak_tflops: float | None = None
    knee: int | None = None  # the smallest n costing 1.5x or more of n = 1
    bounds: list[Bound] = field(default_factory=list)


def build_model(spec: str, device: str, dtype: str):
    """The bundled model, a folder, or `random:PRESET` built on `device` from its shape."""
    import torch

    if spec.startswith("random:"):
        from transformers import LlamaConfig, LlamaForCausalLM

        preset = spec.split(":", 1)[1]
        if preset not in PRESETS:
            raise SystemExit(f"agenttrace bench verify-cost: unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
        config = LlamaConfig(**PRESETS[preset], max_position_embeddings=8192, tie_word_embeddings=False)
        torch.manual_seed(0)
        with torch.device(device):
            model = LlamaForCausalLM(config).to(getattr(torch, dtype))
        return model.eval(), spec
    from agenttrace.generation.models import load_model

    loaded = load_model(None if spec == "bundled" else spec, device=device, dtype=dtype)
    return loaded.model, loaded.name


def measure(model, name: str, *, context: int, widths: tuple[int, ...], repeats: int) -> VerifyCost:
    import torch

    from agenttrace.generation import kv
    from agenttrace.generation.device import device_clock

    device = model.device
    clock = device_clock(device)
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (context,), generator=gen).tolist()
    draft = torch.randint(0, vocab, (max(widths),), generator=gen).tolist()
    result = VerifyCost(name, str(device), str(next(model.parameters()).dtype).removeprefix("torch."), params, context,
                        repeats)
    with torch.inference_mode():
        cache = kv.new_cache(model)
        kv.prefill(model, prompt, cache)
        kv_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
        times: dict[int, float] = {}
        for n in (widths[0], *widths):  # the first width twice: its first pass warms up kernels
            samples = []
            for _ in range(repeats):
                t0 = clock.now_ns()
                kv.forward(model, draft[:n], cache)
                samples.append((clock.now_ns() - t0) / 1e9)
                kv.crop(cache, context)
            times[n] = statistics.median(samples)
    base = times[widths[0]]
    result.points = [Point(n, t * 1e3, t / base, 2 * params * n / t / 1e9) for n, t in times.items()]
    result.bandwidth_gb_s = (weight_bytes + kv_bytes) / base / 1e9
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        peak = next((v for k, v in PEAKS.items() if k in gpu), None)
        if peak:
            result.peak_bandwidth_gb_s, result.peak_tflops = peak[0] / 1e9, peak[1] / 1e12
    result.knee = next((p.n for p in result.points if p.relative >= 1.5), None)
    for alpha in ALPHAS:
        best = best_k_at_widths(alpha, times, base)
        if best:
            result.bounds.append(Bound(alpha, *best))
    return result


def _flops(r: VerifyCost, gflops: float) -> str:
    return f"{gflops / 1e3:.1f}" if r.device.startswith("cuda") else f"{gflops:.1f}"


def _flops_unit(r: VerifyCost) -> str:
    peak = f" (peak {r.peak_tflops:.0f})" if r.peak_tflops else ""
    return ("TFLOP/s" if r.device.startswith("cuda") else "GFLOP/s") + peak


def markdown(r: VerifyCost) -> str:
    """The curve and the bounds as Markdown tables (for BENCHMARKS.md)."""
    peak_bw = f" of {r.peak_bandwidth_gb_s:.0f} GB/s peak" if r.peak_bandwidth_gb_s else " (no peak figure for this device)"
    lines = [f"Verify cost on {r.device}: {r.model}, {r.parameters / 1e6:.0f}M parameters, {r.dtype}, context {r.context} "
             f"tokens, median of {r.repeats} passes per width. Achieved bandwidth at n = 1: {r.bandwidth_gb_s:.0f} GB/s"
             f"{peak_bw}; the pass costs 1.5x of n = 1 from n = {r.knee or '> ' + str(r.points[-1].n)}.", "",
             f"| n (tokens scored) | ms | t(n) / t(1) | {_flops_unit(r)} |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {p.n} | {p.ms:.2f} | {p.relative:.2f} | {_flops(r, p.gflops)} |" for p in r.points]
    lines += ["", "| acceptance alpha | best k | expected speedup (free drafter) |", "| ---: | ---: | ---: |"]
    lines += [f"| {b.alpha} | {b.best_k} | {b.speedup:.2f}x |" for b in r.bounds]
    return "\n".join(lines) + "\n"


def predict(preset: str, device: str, context: int, batches: tuple[int, ...], widths: tuple[int, ...]) -> str:
    """What the roofline predicts for a preset's shapes (bf16) on a device from its data-sheet
    peaks, without running anything: per batch size B and verify width n, the pass's FLOPs per
    byte and its time bound relative to the plain batched step (B requests, n = 1). A Markdown
    table; the device needs no GPU here."""
    from agenttrace.core.roofline import predicted_s, shape_of_config

    if preset not in PRESETS:
        raise SystemExit(f"agenttrace bench verify-cost: unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    peak = next((v for k, v in PEAKS.items() if k.lower() == device.lower()), None)
    if peak is None:
        raise SystemExit(f"agenttrace bench verify-cost: no data-sheet peaks for {device!r}; choose from {', '.join(PEAKS)}")
    bw, flops = peak
    shape = shape_of_config(PRESETS[preset])
    ridge = flops / bw
    lines = [f"Roofline prediction for {preset} (bf16) on {device} (data sheet: {bw / 1e12:.2f} TB/s, "
             f"{flops / 1e12:.0f} dense TFLOP/s; ridge at {ridge:.0f} FLOP/byte), context {context} tokens per request: "
             "each pass's FLOPs per byte and its time bound t(B, n) over t(B, 1), the plain step of the same batch.", "",
             "| batch B | n (tokens per request) | FLOP/byte | bound | t(B, n) / t(B, 1) |", "| ---: | ---: | ---: | :-- | ---: |"]
    for b in batches:
        plain = predicted_s(shape, [(context, 1)] * b, flops, bw)
        for n in widths:
            f, m = shape.pass_cost([(context, n)] * b, b * n)
            t = predicted_s(shape, [(context, n)] * b, flops, bw)
            lines.append(f"| {b} | {n} | {f / m:.1f} | {'memory' if f / m < ridge else 'compute'} | {t / plain:.2f} |")
    return "\n".join(lines) + "\n"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify-cost", help="the cost of verifying n draft tokens on this device, and what it allows")
    p.add_argument("--model", default="bundled",
                   help=f"bundled, a model folder, or random:PRESET ({', '.join(PRESETS)}) (default bundled)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    p.add_argument("--context", type=int, default=512, help="cached tokens before the verified ones (default 512)")
    p.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="comma-separated n (default 1..64)")
    p.add_argument("--repeats", type=int, default=10, help="passes per width (default 10)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's own)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--update-doc", type=Path, default=None, metavar="FILE",
                   help="also replace the `verify-DEVICE` section of FILE (e.g. BENCHMARKS.md) with the tables")
    p.add_argument("--predict", default=None, metavar="GPU",
                   help=f"measure nothing: print the roofline's prediction for --preset's shapes on a GPU's data-sheet "
                        f"peaks ({', '.join(PEAKS)}) by batch size and width")
    p.add_argument("--preset", default="llama-8b", help=f"with --predict: {', '.join(PRESETS)} (default llama-8b)")
    p.add_argument("--batches", default="1,8,32,128", help="with --predict: batch sizes (default 1,8,32,128)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    widths = tuple(sorted({int(w) for w in args.widths.split(",") if w.strip()}))
    if not widths or widths[0] < 1:
        raise SystemExit("agenttrace bench verify-cost: --widths must be positive integers")
    if args.predict:
        batches = tuple(int(b) for b in args.batches.split(",") if b.strip())
        print(predict(args.preset, args.predict, args.context, batches, widths if args.widths != ",".join(map(str, WIDTHS))
                      else (1, 2, 4, 8)), end="")
        return 0
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model, name = build_model(args.model, args.device, args.dtype)
    result = measure(model, name, context=args.context, widths=widths, repeats=args.repeats)
    if args.update_doc is not None:
        from agenttrace.bench.harness.render import update_section

        command = "agenttrace bench verify-cost " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        update_section(args.update_doc, f"verify-{args.device.split(':')[0]}",
                       f"Command: `{command.strip()}`\n\n{markdown(result)}")
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    elif args.markdown:
        print(markdown(result))
    else:
        from rich.table import Table

        from agenttrace.report.terminal import make_console

        t = Table(title=markdown(result).splitlines()[0], title_justify="left")  # the sentence above the table
        for col in ("n", "ms", "t(n)/t(1)", _flops_unit(result)):
            t.add_column(col, justify="right")
        for p in result.points:
            t.add_row(str(p.n), f"{p.ms:.2f}", f"{p.relative:.2f}", _flops(result, p.gflops))
        console = make_console()
        console.print(t)
        for b in result.bounds:
            console.print(f"alpha {b.alpha}: best k {b.best_k}, expected speedup {b.speedup:.2f}x (free drafter)")
    return 0
