"""Weight variants of a model on a CPU: bf16, and weight-only int8 and int4 with bf16 activations,
with torch's own packed kernels (gpt-fast's recipe).

On a CPU a decode step reads every weight once, so its time follows the bytes per step: our fp32
copy of the bundled model reads 513 MiB of linear weights per token, its int4 copy 72 MiB.

    bf16   every weight in bfloat16 (oneDNN's bf16 kernels)
    int8   per-output-channel symmetric 8-bit (`aten._weight_int8pack_mm`)
    int4   group-wise asymmetric 4-bit, groups of 32 (`aten._weight_int4pack_mm_for_cpu`): the
           same block shape as the bundled GGUF's Q4_1, so its weights come back nearly exactly

Measured with `scripts/quant_probe.py` on this project's 2-core CPU (one decode step's linear
layers at the bundled model's shapes): int4 ran about 3x fp32 on 2 threads, bf16 1.7x, int8 slower
than fp32 (its kernel has no fast path there); BENCHMARKS.md has the whole-model figures.

Every variant switches the model to row-wise attention (generation/invariant.py): with bf16
activations that is what keeps greedy speculative output identical to greedy plain output of the
same variant. Quantization changes the model; speculation does not.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from agenttrace.generation.invariant import ROWWISE_MAX_ROWS

__all__ = ["QUANTIZATIONS", "WEIGHTS", "Bf16Linear", "Int4Linear", "Int8Linear", "quantize_model", "quantized_shapes", "shell_model"]

Quantization = Literal["int4", "int8", "bf16"]
QUANTIZATIONS: tuple[str, ...] = ("int4", "int8")  # what --quantize takes; bf16 comes with --dtype bfloat16
WEIGHTS: tuple[str, ...] = ("fp32", "bf16", "int8", "int4")  # the variants, as benchmarks label them
INT4_GROUP = 32  # Q4_1's block; divides the bundled model's widths (576, 1536); 64 measured no faster
COMPUTE_DTYPE = torch.bfloat16  # the activations of the quantized kernels' fast paths


def _is_prefill(x: torch.Tensor) -> bool:
    return x.numel() // x.shape[-1] > ROWWISE_MAX_ROWS


def _wide(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A long pass (prefill) in fp32 with MKL: this project's CPUs have no native bf16 (AVX2), where
    a 434-row bf16 product took 6x the fp32 one and the int4 kernel 2x; dequantizing a layer costs
    a few ms. Plain and speculative decoding prefill alike, so the identity is untouched."""
    y = torch.nn.functional.linear(x.float(), weight, None if bias is None else bias.float())
    return y.to(x.dtype)


class _WeightOnlyLinear(nn.Module):
    """What the variants' linear layers share: a bf16 bias, the prefill path through `_wide`, and
    the short-pass path of each kernel (`_short`) over rows packed as the kernels want them."""

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = nn.Parameter(torch.empty(out_features, dtype=COMPUTE_DTYPE), requires_grad=False) if bias else None

    def _copy_bias(self, linear: nn.Linear) -> None:
        if linear.bias is not None:
            self.bias = nn.Parameter(linear.bias.detach().to(COMPUTE_DTYPE), requires_grad=False)

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight [out, in] the stored values stand for."""
        raise NotImplementedError

    def _short(self, flat: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _is_prefill(x):
            return _wide(x, self.dequantized(), self.bias)
        y = self._short(x.reshape(-1, self.in_features).to(COMPUTE_DTYPE).contiguous())
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return y + self.bias if self.bias is not None else y


class Bf16Linear(_WeightOnlyLinear):
    """A linear layer with bf16 weights: short passes in bf16 (the bits of each row do not depend on
    the others), long ones through `_wide`."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=COMPUTE_DTYPE), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Bf16Linear:
        out = cls(linear.in_features, linear.out_features, linear.bias is not None)
        out.weight = nn.Parameter(linear.weight.detach().to(COMPUTE_DTYPE), requires_grad=False)
        out._copy_bias(linear)
        return out

    def dequantized(self) -> torch.Tensor:
        return self.weight.float()

    def _short(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(flat, self.weight)


class Int4Linear(_WeightOnlyLinear):
    """A linear layer with 4-bit weights in groups of `group` input columns, each group with its
    own scale and zero point (bf16, as the kernel's bf16 path wants them)."""

    PREFILL_ONLY = ("nibbles",)  # not read by a decode step (generation/ceiling.py)

    def __init__(self, in_features: int, out_features: int, group: int = INT4_GROUP, bias: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
        self.group = group
        # Shapes of what _convert_weight_to_int4pack_for_cpu gives; filled by from_linear or a cached file.
        self.register_buffer("packed", torch.empty(out_features, in_features // 2, dtype=torch.uint8))
        self.register_buffer("scales_zeros", torch.empty(in_features // group, out_features, 2, dtype=COMPUTE_DTYPE))
        # The same 4-bit values two to a byte in plain order, for prefill's dequantized product (the
        # kernel's own layout is blocked and undocumented): 25% more memory, read only by prefill.
        self.register_buffer("nibbles", torch.empty(out_features, in_features // 2, dtype=torch.uint8))

    @classmethod
    def from_linear(cls, linear: nn.Linear, group: int = INT4_GROUP) -> Int4Linear:
        w = linear.weight.detach().float()
        n, k = w.shape
        out = cls(k, n, group, linear.bias is not None)
        groups = w.reshape(n, k // group, group)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp_min(1e-8)
        q = torch.round((groups - low) / scale).clamp(0, 15).to(torch.int32).reshape(n, k)
        zero = low + scale * 8  # the kernel computes (q - 8) * scale + zero
        out.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        q8 = q.to(torch.uint8)
        out.nibbles = (q8[:, 0::2] | (q8[:, 1::2] << 4)).contiguous()
        sz = torch.cat([scale.reshape(n, k // group, 1), zero.reshape(n, k // group, 1)], -1)
        out.scales_zeros = sz.transpose(0, 1).contiguous().to(COMPUTE_DTYPE)
        out._copy_bias(linear)
        return out

    def dequantized(self) -> torch.Tensor:
        n, k, g = self.out_features, self.in_features, self.group
        q = torch.stack([self.nibbles & 15, self.nibbles >> 4], -1).reshape(n, k // g, g).float()
        sz = self.scales_zeros.float().transpose(0, 1)  # [n, k // g, 2]
        return ((q - 8) * sz[..., :1] + sz[..., 1:]).reshape(n, k)

    def _short(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, self.group, self.scales_zeros)


class Int8Linear(_WeightOnlyLinear):
    """A linear layer with 8-bit weights and one scale per output channel."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
        self.register_buffer("weight_int8", torch.empty(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scales", torch.empty(out_features, dtype=COMPUTE_DTYPE))

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        w = linear.weight.detach().float()
        out = cls(w.shape[1], w.shape[0], linear.bias is not None)
        scale = (w.abs().amax(1) / 127).clamp_min(1e-8)
        out.weight_int8 = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        out.scales = scale.to(COMPUTE_DTYPE)
        out._copy_bias(linear)
        return out

    def dequantized(self) -> torch.Tensor:
        return self.weight_int8.float() * self.scales.float()[:, None]

    def _short(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales)


def _replace_linears(model: nn.Module, make) -> int:
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                new = make(child)
                if new is not None:
                    parent._modules[name] = new
                    replaced += 1
    return replaced


def quantize_model(model: nn.Module, quantization: Quantization, group: int = INT4_GROUP) -> int:
    """Replace `model`'s linear layers (the output head included) with quantized ones (or bf16 ones)
    and cast the rest to bf16, in place; return how many layers were replaced. A layer whose input width the
    int4 group does not divide is left in bf16. ValueError for an unknown quantization or a model
    off the CPU (the kernels are the CPU ones)."""
    if quantization not in (*QUANTIZATIONS, "bf16"):
        raise ValueError(f"unknown quantization {quantization!r}; choose from {', '.join(QUANTIZATIONS)} (or bf16)")
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ValueError(f"weight-only {quantization} uses torch's CPU kernels and the model is on {device}: "
                         "load it on the CPU, or use dtype bfloat16 on a GPU")
    if quantization == "int4":
        replaced = _replace_linears(model, lambda lin: None if lin.in_features % group else Int4Linear.from_linear(lin, group))
    elif quantization == "int8":
        replaced = _replace_linears(model, Int8Linear.from_linear)
    else:
        replaced = _replace_linears(model, Bf16Linear.from_linear)
    model.to(COMPUTE_DTYPE)  # norms, embeddings and what was left; quantized buffers are integers or bf16 already
    return replaced


def shell_model(model: nn.Module, quantization: Quantization, shapes: dict[str, tuple[int, int, bool]],
                group: int = INT4_GROUP) -> None:
    """Replace the linear layers named in `shapes` (module path -> in, out, bias) with empty
    quantized layers, for loading a cached quantized state dict into."""
    modules = dict(model.named_modules())
    for path, (k, n, bias) in shapes.items():
        parent_path, _, name = path.rpartition(".")
        parent = modules[parent_path] if parent_path else model
        parent._modules[name] = Int4Linear(k, n, group, bias) if quantization == "int4" else Int8Linear(k, n, bias)


def quantized_shapes(model: nn.Module) -> dict[str, tuple[int, int, bool]]:
    """Module path -> (in, out, has bias) of every quantized layer, to rebuild the shell on load."""
    return {
        path: (m.in_features, m.out_features, m.bias is not None)
        for path, m in model.named_modules()
        if isinstance(m, (Int4Linear, Int8Linear))
    }
