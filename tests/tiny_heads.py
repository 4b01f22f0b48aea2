"""A tiny target, its own greedy answers and features, and tiny EAGLE and Medusa heads trained on
them: what the head, training and drafter tests share (built once per session; seconds).

A random tiny model's text is close to random, so the heads learn their training sequences
rather than anything that generalises: tests measure them on those sequences (where drafts are
accepted often, which is what the loop's tests need), never on held-out ones."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from agenttrace.generation.head_drafters import bind_to
from agenttrace.generation.heads import EagleHead, HeadConfig, MedusaHeads, init_eagle
from agenttrace.training import data as datamod
from agenttrace.training.data import TrainingSequence
from agenttrace.training.fit import FitSettings, choose_draft_vocab, fit
from tests.generation.test_quantize import small

SYSTEM = list(range(10, 26))  # a shared "system prompt": sequences reuse its KV cache
EOS = 2


def prompts(n: int, seed: int = 0) -> list[tuple[str, str, str, list[int], int]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        tail = torch.randint(3, 96, (int(torch.randint(6, 20, (1,), generator=gen)),), generator=gen).tolist()
        out.append((f"p{i}", "tiny", "heldout" if i % 5 == 0 else "train", SYSTEM + tail, 24))
    return out


def eagle_config(model, draft_vocab: int = 64) -> HeadConfig:
    c = model.config
    return HeadConfig("eagle", c.hidden_size, c.vocab_size, draft_vocab, 4, 2, c.hidden_size // 4, 2 * c.hidden_size,
                      10000.0, 1e-5)


@dataclass
class TinyHeads:
    model: torch.nn.Module
    train: list[TrainingSequence]
    heldout: list[TrainingSequence]
    eagle: EagleHead
    medusa: MedusaHeads
    untrained_eagle: EagleHead


@lru_cache(maxsize=1)
def tiny_heads(folder: str) -> TinyHeads:
    model = small()
    root = Path(folder)
    records = datamod.answer_prompts(model, prompts(60), root / "answers.jsonl", eos={EOS}, pad=EOS, batch_size=8)
    datamod.record_features(model, records, root / "features")
    seqs = datamod.load_sequences(root / "features")
    train = [s for s in seqs if s.split == "train"]
    heldout = [s for s in seqs if s.split == "heldout"]
    ids = choose_draft_vocab(train, 64, [EOS])
    settings = FitSettings(epochs=20, lr=3e-3, warmup_steps=5, accumulate=4, unroll=2, seed=0)
    eagle = init_eagle(eagle_config(model), 0)
    eagle.draft_ids = ids.clone()
    bind_to(eagle, model)
    fit(eagle, train, heldout, settings)
    untrained = init_eagle(eagle_config(model), 0)
    untrained.draft_ids = ids.clone()
    bind_to(untrained, model)
    medusa = MedusaHeads(HeadConfig("medusa", model.config.hidden_size, model.config.vocab_size, 64, depth=3))
    medusa.draft_ids = ids.clone()
    bind_to(medusa, model)
    fit(medusa, train, heldout, settings)
    return TinyHeads(model, train, heldout, eagle.eval(), medusa.eval(), untrained.eval())
