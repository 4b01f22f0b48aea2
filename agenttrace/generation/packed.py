"""Cheaper verify passes on CPU: oneDNN's prepacked weights for forward passes of a few tokens.

A verify pass scores k+1 tokens. On a CPU, MKL serves a 1-row matrix product with a fast
matrix-vector kernel but a 2-8 row product with a general kernel that is about half as fast per
row, so on the bundled model (2 cores) a pass over 2 tokens cost 1.6-1.7x a 1-token pass and 8
tokens 1.8-2.1x: speculation had to win back that jump before gaining anything. With the weights
reordered once into oneDNN's blocked layout (what PyTorch's inductor does on CPU), the same
passes measured 1.0x (2 tokens), 1.1x (4) and 1.3x (8).

`packed_view(model)` returns the model with every `nn.Linear` wrapped so that products of 2 to
`max_rows` rows use the packed weights; long ones (prefill) keep the stock kernels, and so do
1-row products (plain decoding) unless the CPU has AVX-512, where the packed ones measured faster
(1.3-1.7x; slower on an AVX2 machine). The view shares every parameter
with the model; the packed copies cost one more copy of the linear weights in memory. Results
differ from the stock kernels only in float rounding (the summation order), as any two kernels do.
"""

from __future__ import annotations

import copy
import logging
import weakref
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

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


def packs_one_row() -> bool:
    """Whether 1-row products (plain decoding steps) run on the packed weights in this process.

    Decided by the CPU's vector width, not by timing: oneDNN's packed kernel beat MKL's
    matrix-vector one by 1.3-1.7x on the AVX-512 machines measured and lost on the AVX2 one, and a
    timed probe could flip between runs of a busy machine, giving two models of one process (a
    baseline arm and a speculative one) different kernels for the same step, so greedy text could
    differ at near-ties. One answer for the process, for every model instance and arm."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


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
    views = _VIEWS.setdefault(model, {})
    if max_rows not in views:
        try:
            views[max_rows] = _view(model, max_rows, 1 if packs_one_row() else 2)
        except RuntimeError as exc:  # an unusual layer the packing op refuses: stay on stock kernels
            _log.info("prepacking the model's weights failed, verify passes use stock kernels: %s", exc)
            views[max_rows] = model
    return views[max_rows]  # type: ignore[return-value]


# One view per model and row bound, shared by every LocalChatModel over it: one packed copy of
# the weights per process, not one per arm.
_VIEWS: weakref.WeakKeyDictionary[nn.Module, dict[int, nn.Module]] = weakref.WeakKeyDictionary()
