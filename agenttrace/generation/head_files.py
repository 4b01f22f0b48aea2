"""A trained head's file: its weights (fp16, or int8 with per-row scales), its shapes, the target
model it was trained on and the recipe that made it, in one safetensors file.

The target is named by a fingerprint of its shapes and of the first rows of its embedding table
rounded to bf16 (so the fp32, bf16, int8 and int4 variants of one model share it): a head
trained for another model is refused with what to do, never used to draft garbage.

The project ships heads for the bundled model under `agenttrace/data/heads/`; `head_for` finds
the one for a model (a head the user trained into the cache first), or says to run
`agenttrace train-drafter`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from agenttrace.errors import ModelUnavailable
from agenttrace.generation.heads import EagleHead, HeadConfig, MedusaHeads

__all__ = ["HeadFile", "SHIPPED_DIR", "fingerprint", "head_for", "load_head", "save_head", "shipped_path", "user_path"]

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "heads"
_FORMAT = 1


def fingerprint(model) -> str:
    """Names the target a head fits: its shapes and a digest of its embedding's first rows."""
    config = model.config
    table = model.get_input_embeddings().weight.detach()[:256].to(torch.bfloat16)
    digest = hashlib.sha256(table.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:16]
    return f"{config.model_type}-{config.hidden_size}x{config.num_hidden_layers}-v{config.vocab_size}-{digest}"


@dataclass
class HeadFile:
    """A loaded head and what its file says about it."""

    head: EagleHead | MedusaHeads
    target: str  # the fingerprint of the model it was trained on
    recipe: dict  # command, seed, data, training figures
    path: Path


def save_head(head: EagleHead | MedusaHeads, path: Path, target: str, recipe: dict, *, int8: bool = False) -> int:
    """Write `head` to `path` (fp16, or int8 weight matrices with fp16 per-row scales); returns
    the file's size in bytes."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for name, t in head.state_dict().items():
        t = t.detach().cpu()
        if name == "draft_ids":
            tensors[name] = t.to(torch.int32)
        elif int8 and t.dim() == 2:
            scale = t.float().abs().amax(1, keepdim=True).clamp_min(1e-8) / 127
            tensors[f"{name}.q8"] = torch.round(t.float() / scale).clamp(-127, 127).to(torch.int8)
            tensors[f"{name}.scale"] = scale.to(torch.float16)
        else:
            tensors[name] = t.to(torch.float16)
    meta = {"format": str(_FORMAT), "config": json.dumps(head.config.to_json()), "target": target,
            "recipe": json.dumps(recipe), "int8": json.dumps(int8)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)
    return path.stat().st_size


def load_head(path: Path, *, dtype: torch.dtype = torch.float32) -> HeadFile:
    """The head in `path`, its weights in `dtype` (int8 files are dequantized on load).
    ModelUnavailable, saying why, for a missing, damaged or foreign file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            raw = {k: f.get_tensor(k) for k in f.keys()}
        config = HeadConfig(**json.loads(meta["config"]))
        recipe = json.loads(meta.get("recipe", "{}"))
    except (OSError, SafetensorError, KeyError, TypeError, ValueError) as exc:
        raise ModelUnavailable(f"{path} is not a readable agenttrace head ({type(exc).__name__}: {exc}); "
                               "train one with `agenttrace train-drafter`") from exc
    state: dict[str, torch.Tensor] = {}
    for name, t in raw.items():
        if name.endswith(".scale"):
            continue
        if name.endswith(".q8"):
            base = name[: -len(".q8")]
            state[base] = (t.float() * raw[f"{base}.scale"].float()).to(dtype)
        elif name == "draft_ids":
            state[name] = t.long()
        else:
            state[name] = t.to(dtype)
    head = EagleHead(config) if config.kind == "eagle" else MedusaHeads(config)
    head.draft_ids = torch.empty(config.draft_vocab, dtype=torch.long)  # sized for load_state_dict
    try:
        head.load_state_dict(state)
    except RuntimeError as exc:
        raise ModelUnavailable(f"{path} does not match its own shapes ({exc}); train it again") from exc
    return HeadFile(head.to(dtype).eval(), meta.get("target", ""), recipe, path)


def shipped_path(kind: str, model_name: str, int8: bool = False) -> Path:
    return SHIPPED_DIR / f"{model_name}.{kind}{'-int8' if int8 else ''}.safetensors"


def user_path(kind: str, model_name: str, int8: bool = False) -> Path:
    """Where `agenttrace train-drafter` writes a head by default (the cache's heads folder)."""
    from agenttrace.generation.models import cache_dir

    return cache_dir() / "heads" / shipped_path(kind, model_name, int8).name


def head_for(kind: str, model, model_name: str, *, path: Path | None = None, int8: bool = False) -> HeadFile:
    """The head of `kind` ("eagle" or "medusa") for `model`: the file `path`, else one that
    `train-drafter` wrote into the cache, else the one the project ships for `model_name`.
    ModelUnavailable saying what to do when there is none or it was trained for another model."""
    candidates = [path] if path is not None else [user_path(kind, model_name, int8), shipped_path(kind, model_name, int8)]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise ModelUnavailable(f"no {kind} head for {model_name} ({' or '.join(str(p) for p in candidates)}): "
                               f"train one with `agenttrace train-drafter --kind {kind}` (add --model for your model)")
    loaded = load_head(found)
    mine = fingerprint(model)
    if loaded.target != mine:
        raise ModelUnavailable(f"the {kind} head in {found} was trained for another model ({loaded.target}; this one "
                               f"is {mine}): train one for it with `agenttrace train-drafter --model ... --kind {kind}`")
    return loaded
