"""Cheaper verify passes on CPU: oneDNN's prepacked weights for forward passes of a few tokens.

A verify pass scores k+1 tokens. On a CPU, MKL serves a 1-row matrix product with a fast
matrix-vector kernel but a 2-8 row product with a general kernel that is about half as fast per
row, so on the bundled model (2 cores) a pass over 2 tokens cost 1.6-1.7x a 1-token pass and 8
tokens 1.8-2.1x: speculation had to win back that jump before gaining anything. With the weights
reordered once into oneDNN's blocked layout (what PyTorch's inductor does on CPU), the same
passes measured 1.0x (2 tokens), 1.1x (4) and 1.3x (8).

`packed_view(model)` returns the model with every `nn.Linear` wrapped so that products of 2 to
`max_rows` rows use the packed weights; long ones (prefill) keep the stock kernels, and so do
1-row products (plain decoding) unless a probe measures the packed ones faster on this CPU (they
were 1.3x faster on an AVX-512 machine, slower on the AVX2 one). The view shares every parameter
with the model; the packed copies cost one more copy of the linear weights in memory. Results
differ from the stock kernels only in float rounding (the summation order), as any two kernels do.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn
from transformers import PreTrainedModel

from agenttrace.clock import default_clock, elapsed_s

_log = logging.getLogger(__name__)


def packing_available(model: PreTrainedModel) -> bool:
    """True on CPU float32 models where PyTorch's oneDNN linear ops are present."""
    return (
        model.device.type == "cpu"
        and model.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear(nn.Module):
    """`linear` with a prepacked copy of its weight for products of min_rows..max_rows rows."""

    def __init__(self, linear: nn.Linear, max_rows: int = 64, batch_hint: int = 8, min_rows: int = 2) -> None:
        super().__init__()
        self.linear = linear
        self.max_rows = max_rows
        self.min_rows = min_rows
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_hint)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows < self.min_rows or rows > self.max_rows or x.dtype != torch.float32:
            return self.linear(x)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.linear.bias, "none", [], "")


_ONE_ROW: dict[tuple[int, int, int], bool] = {}


def packed_one_row_is_faster(in_features: int, out_features: int) -> bool:
    """Whether a 1-row product is faster on packed weights than on the stock kernel, here: MKL's
    matrix-vector path won on the AVX2 machine this was first measured on (so plain steps kept
    it), oneDNN's packed one by 1.3x on an AVX-512 one. Timed once per shape and thread count
    (about 20 ms), since it is the CPU that decides."""
    key = (in_features, out_features, torch.get_num_threads())
    if key not in _ONE_ROW:
        with torch.inference_mode():
            gen = torch.Generator().manual_seed(0)
            weight = torch.randn(out_features, in_features, generator=gen)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, 8)
            x = torch.randn(1, in_features, generator=gen)
            stock = lambda: torch.nn.functional.linear(x, weight)  # noqa: E731
            fast = lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")  # noqa: E731
            clock = default_clock()
            best = {}
            for name, f in (("stock", stock), ("packed", fast), ("stock", stock), ("packed", fast)):
                for _ in range(5):
                    f()
                t = clock.now_ns()
                for _ in range(40):
                    f()
                best[name] = min(best.get(name, float("inf")), elapsed_s(clock, t))
        _ONE_ROW[key] = best["packed"] < 0.95 * best["stock"]
    return _ONE_ROW[key]


def _has_linear(module: nn.Module) -> bool:
    return any(type(m) is nn.Linear for m in module.modules())


def _view(module: nn.Module, max_rows: int, min_rows: int) -> nn.Module:
    # A shallow copy with its own child dict: replacing children leaves the original untouched.
    out = copy.copy(module)
    out._modules = {}
    for name, child in module._modules.items():
        if child is None or not _has_linear(child):
            out._modules[name] = child
        elif type(child) is nn.Linear:
            out._modules[name] = PackedLinear(child, max_rows, min_rows=min_rows)
        else:
            out._modules[name] = _view(child, max_rows, min_rows)
    return out


def packed_view(model: PreTrainedModel, max_rows: int = 64) -> PreTrainedModel:
    """`model` with packed weights for short multi-token passes (see the module docstring).
    Returns `model` itself when packing is not available (GPU, other dtypes, no oneDNN)."""
    if not packing_available(model):
        return model
    # 1-row products (plain steps) take the packed weights too where that measures faster here
    widest = max((m for m in model.modules() if type(m) is nn.Linear), key=lambda m: m.weight.numel(), default=None)
    min_rows = 1 if widest is not None and packed_one_row_is_faster(widest.in_features, widest.out_features) else 2
    try:
        return _view(model, max_rows, min_rows)  # type: ignore[return-value]
    except RuntimeError as exc:  # an unusual layer the packing op refuses: stay on stock kernels
        _log.info("prepacking the model's weights failed, verify passes use stock kernels: %s", exc)
        return model
