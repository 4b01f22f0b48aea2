"""Where a generation's forward passes sit against the machine's roofline.

A pass over T new tokens multiplies every weight matrix by T rows (2 FLOPs per weight per row),
attends each row over the keys it sees (4 FLOPs per key per head dimension per layer: scores and
the weighted sum), reads the weights once and each request's KV cache once. Its arithmetic
intensity, FLOPs per byte moved, decides what bounds it: below the ridge point (peak FLOP/s over
peak bytes/s) memory, above it compute. A batch-1 decode step sits far left (about 2 FLOPs per
weight byte in fp32, less than 1 in bf16); a verify pass of n tokens or a batch of B requests
moves it right by n or B, which is why verifying is nearly free at batch 1 and not at batch 32.

`ModelShape` holds what the counting needs (from the model's config and its stored weights);
`RooflineMeter` sums a generation's passes by phase (`prefill`, `decode`, `verify@n`, `batch@B`);
`Roofline` is the record the span and the report carry. Counted, not profiled: activations,
norms and the rotary embedding are left out (a few percent of the bytes of these shapes), and the
LM head is counted for the rows whose logits were computed.

Nothing here imports torch: a loaded model's shape is `generation/ceiling.py:model_shape`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ModelShape", "Roofline", "RooflineMeter", "RooflinePhase", "phase_order", "predicted_s",
           "shape_of_config"]


@dataclass(frozen=True)
class ModelShape:
    layers: int
    heads: int
    head_dim: int
    vocab: int
    hidden: int
    layer_params: int  # weights of the decoder layers' matrix products
    weight_bytes: int  # what a pass reads of the weights and their scales, LM head included
    kv_bytes_per_token: int  # keys and values of one token, all layers

    def pass_cost(self, contexts: Sequence[tuple[int, int]], logit_rows: int) -> tuple[float, float]:
        """(FLOPs, bytes) of one pass: per segment (cached tokens, new tokens), the new tokens
        attending causally over the cached ones and each other."""
        rows = sum(n for _, n in contexts)
        keys = sum(n * cached + n * (n + 1) // 2 for cached, n in contexts)  # keys seen, summed over rows
        flops = 2.0 * self.layer_params * rows + 2.0 * self.vocab * self.hidden * logit_rows
        flops += 4.0 * self.layers * self.heads * self.head_dim * keys
        moved = self.weight_bytes + self.kv_bytes_per_token * sum(cached + n for cached, n in contexts)
        return flops, float(moved)


@dataclass(frozen=True)
class RooflinePhase:
    """A generation's passes of one kind: how many, their new tokens, and what they did."""

    phase: str
    passes: int
    rows: int
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def flop_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Roofline:
    """A generation's phases and the machine's measured peaks (0 when not measured)."""

    phases: tuple[RooflinePhase, ...]
    peak_flop_s: float = 0.0
    peak_bytes_s: float = 0.0
    device: str = ""

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the roofs meet: below it a pass is memory-bound."""
        return self.peak_flop_s / self.peak_bytes_s if self.peak_bytes_s else 0.0

    def roof(self, intensity: float) -> float:
        """The FLOP/s the machine allows at `intensity`."""
        return min(self.peak_flop_s, self.peak_bytes_s * intensity)

    def bound(self, phase: RooflinePhase) -> str:
        if not self.peak_bytes_s:
            return "-"
        return "memory" if phase.intensity < self.ridge else "compute"


def phase_order(name: str) -> tuple[int, int]:
    """Sort key: prefill, decode, verify by width, batches by size."""
    kind, _, n = name.partition("@")
    rank = {"prefill": 0, "decode": 1, "verify": 2, "batch": 3}.get(kind, 4)
    return rank, int(n) if n.isdigit() else 0


@dataclass
class RooflineMeter:
    """Sums passes by phase for one generation."""

    shape: ModelShape
    _sums: dict[str, list[float]] = field(default_factory=dict)

    def add(self, phase: str, contexts: Sequence[tuple[int, int]], logit_rows: int, seconds: float) -> None:
        flops, moved = self.shape.pass_cost(contexts, logit_rows)
        s = self._sums.setdefault(phase, [0, 0, 0.0, 0.0, 0.0])
        s[0] += 1
        s[1] += sum(n for _, n in contexts)
        s[2] += flops
        s[3] += moved
        s[4] += seconds

    def result(self, peaks=None) -> Roofline:
        phases = tuple(RooflinePhase(p, int(s[0]), int(s[1]), s[2], s[3], s[4])
                       for p, s in sorted(self._sums.items(), key=lambda kv: phase_order(kv[0])))
        if peaks is None:
            return Roofline(phases)
        return Roofline(phases, peaks.matmul_gflop_s * 1e9, peaks.read_gb_s * 1e9, peaks.device)


def add_phases(sums: dict[str, list[float]], phases: Iterable[RooflinePhase]) -> None:
    """Adds phases into `sums` by name (passes, rows, FLOPs, bytes, seconds)."""
    for p in phases:
        s = sums.setdefault(p.phase, [0, 0, 0.0, 0.0, 0.0])
        for i, v in enumerate((p.passes, p.rows, p.flops, p.bytes, p.seconds)):
            s[i] += v


def phases_of(sums: dict[str, list[float]]) -> list[RooflinePhase]:
    """The phases of `sums`, in phase order."""
    return [RooflinePhase(n, int(s[0]), int(s[1]), s[2], s[3], s[4])
            for n, s in sorted(sums.items(), key=lambda kv: phase_order(kv[0]))]


def merge(phases: Iterable[RooflinePhase]) -> list[RooflinePhase]:
    """Phases of several generations summed by name (the report's view of a trace)."""
    sums: dict[str, list[float]] = {}
    add_phases(sums, phases)
    return phases_of(sums)


def shape_of_config(c: dict, bytes_per_weight: int = 2) -> ModelShape:
    """The shape of a Llama-architecture model from its config values (verify-cost's presets),
    stored at `bytes_per_weight` (2: bf16), its LM head untied."""
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = c.get("num_key_value_heads", heads), h // heads
    per_layer = 2 * h * h + 2 * h * kv_heads * head_dim + 3 * h * c["intermediate_size"]
    weights = (layers * per_layer + 2 * c["vocab_size"] * h) * bytes_per_weight  # layers, head; one embedding row aside
    kv = 2 * layers * kv_heads * head_dim * bytes_per_weight
    return ModelShape(layers, heads, head_dim, c["vocab_size"], h, layers * per_layer, weights, kv)


def predicted_s(shape: ModelShape, contexts: Sequence[tuple[int, int]], peak_flop_s: float, peak_bytes_s: float) -> float:
    """A pass's time bound on a device with these peaks: the larger of its compute and its
    memory time (the roofline model: no overlap loss, no launch overhead)."""
    flops, moved = shape.pass_cost(contexts, sum(n for _, n in contexts))
    return max(flops / peak_flop_s, moved / peak_bytes_s)
