"""Self-distillation data: the target answers the training prompts itself (greedy, batched),
then one pass over each prompt + answer records its features at every position.

Both stages write as they go into the data folder, so an interrupted run resumes where it
stopped: `answers.jsonl` gets a line per answered prompt (a batch at a time), and the features
are written in shards of `SHARD` sequences, each named by its number. Sequences are recorded in
token order, so those sharing a prompt prefix (the suites' system prompt and examples, about 400
tokens) come one after another and each reuses the previous one's KV cache for what they share:
the pass then costs only the rest.

Features are stored in fp16 (the head reads them in fp32): [tokens, d] per sequence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from agenttrace.generation import kv

__all__ = ["SHARD", "TrainingSequence", "answer_prompts", "load_answers", "load_sequences", "record_features"]

SHARD = 64
Progress = Callable[[int], None]  # told how many more items are done


@dataclass
class TrainingSequence:
    """One training sequence: prompt + the target's answer, and the target's features there."""

    id: str
    source: str
    split: str
    tokens: torch.Tensor  # [L] long
    prompt_len: int
    features: torch.Tensor | None = None  # [L, d] fp16


def load_answers(path: Path) -> dict[str, dict]:
    """The answers already written (id -> record); a torn last line (an interrupted write) is
    dropped and answered again."""
    done: dict[str, dict] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[record["id"]] = record
    return done


@torch.inference_mode()
def _answer_batch(model, prompts: list[list[int]], budget: int, eos: set[int], pad: int,
                  temperature: float = 0.0, seed: int = 0) -> list[list[int]]:
    """Answers of a batch, left-padded (transformers' generate), greedy or sampled at
    `temperature` (seeded); each cut after its EOS."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 0.95, "top_k": 0} if temperature else \
        {"do_sample": False}
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=budget,
                         pad_token_id=pad, eos_token_id=sorted(eos), **sampling)
    answers = []
    for row in out[:, width:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        answers.append(row[:end])
    return answers


def answer_prompts(model, prompts: Sequence[tuple[str, str, str, list[int], int]], path: Path, *, eos: set[int],
                   pad: int, batch_size: int = 8, temperature: float = 0.0, seed: int = 0,
                   progress: Progress | None = None) -> dict[str, dict]:
    """Answer every (id, source, split, prompt ids, budget) not yet in `path`, in batches of
    similar length, appending each batch's records; returns every record. Greedy, or sampled at
    `temperature` (each batch seeded from `seed` and its first id, so a resumed run draws the
    same answers)."""
    done = load_answers(path)
    todo = sorted((p for p in prompts if p[0] not in done), key=lambda p: len(p[3]))
    if progress is not None and done:
        progress(len(done))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
        with path.open("a", encoding="utf-8") as f:  # after a torn last line, start a fresh one
            f.write("\n")
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        batch_seed = seed + int(hashlib.sha256(batch[0][0].encode()).hexdigest()[:8], 16)
        answers = _answer_batch(model, [p[3] for p in batch], max(p[4] for p in batch), eos, pad, temperature,
                                batch_seed)
        lines = []
        for (pid, source, split, ids, budget), answer in zip(batch, answers, strict=True):
            record = {"id": pid, "source": source, "split": split, "prompt": ids, "answer": answer[:budget]}
            done[pid] = record
            lines.append(json.dumps(record))
        with path.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        if progress is not None:
            progress(len(batch))
    return done


def _ordered(records: dict[str, dict]) -> list[dict]:
    return sorted(records.values(), key=lambda r: (r["prompt"] + r["answer"], r["id"]))


@torch.inference_mode()
def record_features(model, records: dict[str, dict], folder: Path, *, progress: Progress | None = None) -> int:
    """Write the features of every answered sequence into shards under `folder`, skipping the
    shards already there; returns how many shards there are."""
    from safetensors.torch import save_file

    ordered = _ordered(records)
    shards = (len(ordered) + SHARD - 1) // SHARD
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        path = folder / f"features-{s:05d}.safetensors"
        chunk = ordered[s * SHARD : (s + 1) * SHARD]
        if path.is_file():
            if progress is not None:
                progress(len(chunk))
            continue
        prev_tokens: list[int] = []
        prev_cache = None
        prev_feats = None
        tokens_all, feats_all, offsets, prompt_lens = [], [], [0], []
        for r in chunk:
            tokens = r["prompt"] + r["answer"]
            shared = min(kv.common_prefix_length(prev_tokens, tokens), len(tokens) - 1) if prev_cache else 0
            if shared:
                from transformers import DynamicCache

                cache = DynamicCache(ddp_cache_data=[(k[:, :, :shared], v[:, :, :shared]) for k, v in prev_cache],
                                     config=model.config)
            else:
                cache = kv.new_cache(model)
            _, hidden = kv.forward_features(model, tokens[shared:], cache, last_only=True)
            feats = torch.cat([prev_feats[:shared], hidden.float()]) if shared else hidden.float()
            prev_tokens, prev_feats = tokens, feats
            prev_cache = [(layer.keys, layer.values) for layer in cache.layers]
            tokens_all.append(torch.tensor(tokens, dtype=torch.int32))
            feats_all.append(feats.to(torch.float16))
            offsets.append(offsets[-1] + len(tokens))
            prompt_lens.append(len(r["prompt"]))
            if progress is not None:
                progress(1)
        meta = {"ids": json.dumps([r["id"] for r in chunk]), "sources": json.dumps([r["source"] for r in chunk]),
                "splits": json.dumps([r["split"] for r in chunk])}
        tmp = path.with_suffix(".tmp")
        save_file({"tokens": torch.cat(tokens_all), "features": torch.cat(feats_all),
                   "offsets": torch.tensor(offsets, dtype=torch.int64),
                   "prompt_lens": torch.tensor(prompt_lens, dtype=torch.int32)}, str(tmp), metadata=meta)
        tmp.replace(path)
    return shards


def load_sequences(folder: Path) -> list[TrainingSequence]:
    """Every sequence in the shards under `folder`, with its features."""
    from safetensors import safe_open

    out: list[TrainingSequence] = []
    for path in sorted(folder.glob("features-*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            tokens, feats = f.get_tensor("tokens").long(), f.get_tensor("features")
            offsets, prompt_lens = f.get_tensor("offsets").tolist(), f.get_tensor("prompt_lens").tolist()
        ids, sources, splits = (json.loads(meta[k]) for k in ("ids", "sources", "splits"))
        for i, pid in enumerate(ids):
            a, b = offsets[i], offsets[i + 1]
            out.append(TrainingSequence(pid, sources[i], splits[i], tokens[a:b], prompt_lens[i], feats[a:b]))
    return out
