"""The converted weight variants, cached: quantize once, then load the packed weights directly.

Quantizing the bundled model takes seconds and needs its fp32 copy in memory first (538 MB), so
`load_model(quantize=...)` saves what it made: one safetensors file with every parameter and
buffer (the packed int4/int8 tensors, their scales, the rotary tables), beside a small JSON of the
quantized layers' shapes. A later load builds the model's skeleton on the meta device (no weight
initialisation, no fp32 copy), swaps in empty quantized layers and assigns the file's tensors,
memory-mapped. Packed layouts can change with torch, so the key names torch's version.

Folder: `<cache>/weights/<name>-<variant>-<digest>/` (the digest covers the source, the variant,
the int4 group and torch's version).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path

_log = logging.getLogger(__name__)

__all__ = ["cached_variant_dir", "load_variant", "save_variant", "write_folder_atomically"]

_FORMAT = 2  # 2: int4 layers keep plain nibbles for prefill


def cached_variant_dir(cache: Path, name: str, source: str, variant: str) -> Path:
    import torch

    from agenttrace.generation.quantize import INT4_GROUP

    key = json.dumps([_FORMAT, str(Path(source).resolve()) if Path(source).exists() else source, variant, INT4_GROUP,
                      torch.__version__])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache / "weights" / f"{Path(name).name}-{variant}-{digest}"


def save_variant(model, folder: Path, quantization: str) -> None:
    """Write `model` (already quantized) into `folder`, atomically (a temporary sibling renamed)."""
    from safetensors.torch import save_file

    from agenttrace.generation.quantize import quantized_shapes

    tensors = {name: t.contiguous() for name, t in model.named_parameters()}
    tensors.update({name: t.contiguous() for name, t in model.named_buffers()})
    def write(tmp: Path) -> None:
        save_file(tensors, str(tmp / "weights.safetensors"))
        (tmp / "layers.json").write_text(json.dumps({"quantization": quantization, "layers": quantized_shapes(model)}))

    write_folder_atomically(folder, write, "layers.json")


def write_folder_atomically(target: Path, write, marker: str) -> None:
    """Fill a temporary sibling of `target` with `write(tmp)` and rename it into place, so an
    interrupted write leaves no half folder; another process that finished first (its `marker`
    file is there) wins."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_variant(folder: Path, source: str):
    """The quantized model saved in `folder` (its config and generation config read from
    `source`), or None when the folder is missing or unreadable (the caller quantizes again)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from agenttrace.generation.quantize import COMPUTE_DTYPE, shell_model

    try:
        meta = json.loads((folder / "layers.json").read_text())
        tensors = load_file(str(folder / "weights.safetensors"))
    except (OSError, ValueError, SafetensorError) as exc:
        if folder.exists():
            _log.warning("ignoring the unreadable cached weights in %s (%s); quantizing again", folder, exc)
        return None
    config = AutoConfig.from_pretrained(source)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=COMPUTE_DTYPE)
    shell_model(model, meta["quantization"], {k: tuple(v) for k, v in meta["layers"].items()})
    modules = dict(model.named_modules())
    for name in [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]:
        path, _, leaf = name.rpartition(".")
        owner = modules[path] if path else model
        if name not in tensors:
            _log.warning("cached weights in %s lack %s; quantizing again", folder, name)
            return None
        if leaf in owner._parameters:
            owner._parameters[leaf] = torch.nn.Parameter(tensors[name], requires_grad=False)
        else:
            owner._buffers[leaf] = tensors[name]
    try:
        model.generation_config = GenerationConfig.from_pretrained(source)
    except OSError:
        pass  # the config's own defaults stay
    return model.eval()
