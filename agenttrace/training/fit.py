"""Training a draft head on recorded features, and measuring it on held-out sequences.

EAGLE is trained as it drafts (EAGLE-3's training-time test): pass 1 reads the target's true
features (with a little noise) and predicts each next feature; pass m reads pass m-1's
prediction at the previous position with the true next token, attending over the true pairs up
to where drafting would have started plus its own earlier draft entries, exactly the entries the
head's KV cache holds at draft depth m. So the loss at depth m is the loss of the m-th drafted
token given the first m-1 were right, and the same passes measure greedy acceptance by depth
exactly (`eagle_acceptance`). Each pass's loss: a smooth L1 between predicted and true feature
(scaled by the features' spread) and a cross entropy against the target's own distribution over
the draft vocabulary.

Medusa heads are trained on the same sequences: head j on the true feature at t against the
target's distribution at t + j.

Positions: pair j is (f_j, x_{j+1}) and predicts f_{j+1}, whose LM-head argmax is x_{j+2}. A draft
after a prompt of P tokens starts with the pending token x_P, so depth m drafts from pair
j >= P - 2 + m; the loss counts those pairs only (the prompt is context, not a target).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.generation.heads import EagleHead, MedusaHeads
from agenttrace.training.data import TrainingSequence

__all__ = ["FitSettings", "choose_draft_vocab", "eagle_acceptance", "fit", "medusa_acceptance", "vocab_coverage"]


@dataclass(frozen=True)
class FitSettings:
    """How a head is trained. Defaults are what the shipped heads used."""

    epochs: int = 10
    lr: float = 1e-3
    warmup_steps: int = 20
    accumulate: int = 4  # sequences per optimizer step
    unroll: int = 3  # EAGLE: drafting depths trained (training-time test)
    depth_decay: float = 0.8  # EAGLE: weight of depth m is decay^(m-1)
    noise: float = 0.05  # EAGLE: Gaussian noise on the true features, as a share of their spread
    token_weight: float = 0.5  # cross entropy's weight beside the feature regression
    clip: float = 1.0
    seed: int = 0


@dataclass
class FitReport:
    """What training did: seconds, optimizer steps, the last epoch's mean loss and the
    held-out acceptance by depth after each epoch."""

    seconds: float = 0.0
    steps: int = 0
    loss: list[float] = field(default_factory=list)
    heldout: list[list[float]] = field(default_factory=list)


def choose_draft_vocab(train: Sequence[TrainingSequence], size: int, always: Sequence[int] = (),
                       vocab: int | None = None) -> torch.Tensor:
    """The `size` target ids the head may propose: the most frequent answer tokens of the
    training data, then prompt tokens (a tenth of the weight), `always` (EOS) included; sorted.
    With `vocab`, the slots the data leaves are filled with the lowest ids it did not use: a
    byte-level BPE numbers its merges in the order it learned them, most frequent first, so
    those are the tokenizer's commonest (the data alone covers only what it happened to say)."""
    counts: dict[int, float] = {}
    for s in train:
        for t in s.tokens[s.prompt_len :].tolist():
            counts[t] = counts.get(t, 0.0) + 1.0
        for t in s.tokens[: s.prompt_len].tolist():
            counts[t] = counts.get(t, 0.0) + 0.1
    ranked = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    chosen = list(dict.fromkeys([*always, *ranked]))[:size]
    if vocab is not None and len(chosen) < size:
        seen = set(chosen)
        chosen += [t for t in range(vocab) if t not in seen][: size - len(chosen)]
    return torch.tensor(sorted(chosen), dtype=torch.long)


def vocab_coverage(seqs: Sequence[TrainingSequence], draft_ids: torch.Tensor) -> float:
    """The share of answer tokens the draft vocabulary contains (a draft can match no other)."""
    allowed = set(draft_ids.tolist())
    answer = [t for s in seqs for t in s.tokens[s.prompt_len :].tolist()]
    return sum(t in allowed for t in answer) / max(len(answer), 1)


def _attend(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], rows: torch.Tensor,
            m: int) -> torch.Tensor:
    """Attention of pass m's queries q [heads, R, hd] (pairs `rows`): over pass 1's keys up to
    position row - (m - 1) and over pass k's key at row - (m - k) for k = 2..m (the draft's own
    earlier entries and itself). keys/values: per pass [kv_heads, n, hd]. Returns [heads, R, hd]."""
    heads, _, hd = q.shape
    group = heads // keys[0].shape[0]
    n = keys[0].shape[1]
    scale = hd ** -0.5
    k1 = keys[0].repeat_interleave(group, 0)  # [heads, n, hd]
    v1 = values[0].repeat_interleave(group, 0)
    scores = (q @ k1.transpose(-1, -2)) * scale  # [heads, R, n]
    visible = torch.arange(n, device=q.device)[None, :] <= (rows - (m - 1))[:, None]  # [R, n]
    scores = scores.masked_fill(~visible, float("-inf"))
    own_k, own_v = [], []
    for k in range(2, m + 1):
        at = (rows - (m - k)).clamp_min(0)
        own_k.append(keys[k - 1].repeat_interleave(group, 0)[:, at])  # [heads, R, hd]
        own_v.append(values[k - 1].repeat_interleave(group, 0)[:, at])
    if own_k:
        diag = torch.stack([(q * kk).sum(-1) * scale for kk in own_k], -1)  # [heads, R, m - 1]
        scores = torch.cat([scores, diag], -1)
    weights = torch.softmax(scores, -1)
    out = weights[..., :n] @ v1
    for i, vv in enumerate(own_v):
        out = out + weights[..., n + i, None] * vv
    return out


def eagle_passes(head: EagleHead, feats: torch.Tensor, tokens: torch.Tensor, first: int, depth: int,
                 noise_std: float = 0.0, generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """The head's outputs [n, d] per drafting depth 1..depth over one sequence's n = L - 1 pairs
    (module docstring). Depths past 1 are computed for pairs >= `first` only (zeros before)."""
    n = feats.shape[0] - 1
    positions = torch.arange(n)
    pair_tokens = tokens[1:]
    inputs = feats[:-1]
    if noise_std:
        inputs = inputs + noise_std * torch.randn(inputs.shape, generator=generator)
    x = head.inputs(inputs, pair_tokens)
    q, k, v = head.qkv(x, positions)
    outs = [head.finish(x, _attend(q, [k], [v], positions, 1))]
    keys, values = [k], [v]
    rows = torch.arange(first, n)
    for m in range(2, depth + 1):
        xm = head.inputs(outs[-1][(rows - 1).clamp_min(0)], pair_tokens[rows])
        qm, km, vm = head.qkv(xm, rows)
        keys.append(k.new_zeros(k.shape).index_copy(1, rows, km))
        values.append(v.new_zeros(v.shape).index_copy(1, rows, vm))
        hm = head.finish(xm, _attend(qm, keys, values, rows, m))
        outs.append(x.new_zeros(x.shape).index_copy(0, rows, hm))
    return outs


def _eagle_loss(head: EagleHead, seq: TrainingSequence, s: FitSettings, spread: float,
                generator: torch.Generator) -> torch.Tensor:
    feats, tokens = seq.features.float(), seq.tokens
    n = feats.shape[0] - 1
    first = max(seq.prompt_len - 1, 0)
    if first >= n:
        return feats.new_zeros(())
    outs = eagle_passes(head, feats, tokens, first, s.unroll, s.noise * spread, generator)
    with torch.no_grad():
        target_p = torch.softmax(head.logits(feats[1:]), -1)  # [n, Vd]: the target's distribution, per pair
    total = feats.new_zeros(())
    for m, out in enumerate(outs, start=1):
        lo = first + m - 1
        if lo >= n:
            break
        pred = out[lo:n]
        feat_loss = F.smooth_l1_loss(pred / spread, feats[lo + 1 : n + 1] / spread)
        ce = -(target_p[lo:n] * torch.log_softmax(head.logits(pred), -1)).sum(-1).mean()
        total = total + s.depth_decay ** (m - 1) * (feat_loss + s.token_weight * ce)
    return total


def _medusa_loss(heads: MedusaHeads, seq: TrainingSequence) -> torch.Tensor:
    feats = seq.features.float()
    length = feats.shape[0]
    first = max(seq.prompt_len - 1, 0)
    total = feats.new_zeros(())
    hidden = heads(feats[first:])  # [depth, R, d]
    with torch.no_grad():
        target_p = torch.softmax(heads.logits(feats), -1)  # [L, Vd]
    for j in range(heads.config.depth):
        # head j+1 reads f_t and guesses token t + 2 + j: the target's distribution at t + 1 + j
        rows = length - first - (j + 1)
        if rows <= 0:
            break
        logp = torch.log_softmax(heads.logits(hidden[j, :rows]), -1)
        total = total - (target_p[first + j + 1 : first + j + 1 + rows] * logp).sum(-1).mean()
    return total


def feature_spread(seqs: Sequence[TrainingSequence]) -> float:
    """The features' standard deviation (the noise's and the regression's scale)."""
    sample = torch.cat([s.features[:: max(1, len(s.features) // 64)].float() for s in seqs])
    return float(sample.std())


@torch.no_grad()
def eagle_acceptance(head: EagleHead, seqs: Sequence[TrainingSequence], depth: int) -> list[float]:
    """Greedy chain acceptance by depth: the share of drafting positions at which the head's
    first m drafted tokens all equal the target's greedy continuation (the recorded answer),
    m = 1..depth. Exact for greedy drafting from the true context (module docstring)."""
    hits = [0] * depth
    total = 0
    for seq in seqs:
        feats, tokens = seq.features.float(), seq.tokens
        n = feats.shape[0] - 1
        first = max(seq.prompt_len - 1, 0)
        if first >= n:
            continue
        outs = eagle_passes(head, feats, tokens, first, depth)
        ids = [head.draft_ids[head.logits(o).argmax(-1)] for o in outs]  # per depth [n]
        for start in range(first, n - 1):  # the draft whose first token is pair `start`'s guess
            total += 1
            for m in range(depth):
                j = start + m  # pair j guesses token j + 2
                if j + 2 >= len(tokens) or int(ids[m][j]) != int(tokens[j + 2]):
                    break
                hits[m] += 1
    return [h / max(total, 1) for h in hits]


@torch.no_grad()
def medusa_acceptance(heads: MedusaHeads, seqs: Sequence[TrainingSequence], depth: int) -> list[float]:
    """`eagle_acceptance` for Medusa heads: head j's guess from f_t against token t + 1 + j."""
    depth = min(depth, heads.config.depth)
    hits = [0] * depth
    total = 0
    for seq in seqs:
        feats, tokens = seq.features.float(), seq.tokens
        length = feats.shape[0]
        first = max(seq.prompt_len - 1, 0)
        ids = heads.draft_ids[heads.logits(heads(feats[first:])).argmax(-1)]  # [depth, R]
        for r in range(length - first - 1):
            t = first + r
            total += 1
            for m in range(depth):
                if t + 2 + m >= length or int(ids[m, r]) != int(tokens[t + 2 + m]):
                    break
                hits[m] += 1
    return [h / max(total, 1) for h in hits]


def fit(head: EagleHead | MedusaHeads, train: Sequence[TrainingSequence], heldout: Sequence[TrainingSequence],
        settings: FitSettings, *, checkpoint: Path | None = None,
        progress: Callable[[int, float], None] | None = None) -> FitReport:
    """Train `head` (bound to the target's tables) on `train`; after each epoch measure greedy
    acceptance on `heldout`. With `checkpoint`, the state is saved after every epoch and a run
    that finds one resumes from it. `progress(sequences done, loss)` after each step."""
    torch.manual_seed(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    steps_per_epoch = math.ceil(len(train) / settings.accumulate)
    total_steps = steps_per_epoch * settings.epochs

    def lr_at(step: int) -> float:
        if step < settings.warmup_steps:
            return (step + 1) / settings.warmup_steps
        return 0.5 * (1 + math.cos(math.pi * (step - settings.warmup_steps) / max(1, total_steps - settings.warmup_steps)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    report = FitReport()
    start_epoch = 0
    if checkpoint is not None and checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"])
        report = state["report"]
        start_epoch = state["epoch"]
    spread = feature_spread(train)
    eagle = isinstance(head, EagleHead)
    measure = (lambda: eagle_acceptance(head, heldout, settings.unroll + 1)) if eagle else \
        (lambda: medusa_acceptance(head, heldout, head.config.depth))
    clock = default_clock()
    t0 = clock.now_ns()
    for epoch in range(start_epoch, settings.epochs):
        head.train()
        order = torch.randperm(len(train), generator=gen).tolist()
        losses = []
        for step in range(steps_per_epoch):
            opt.zero_grad()
            chunk = order[step * settings.accumulate : (step + 1) * settings.accumulate]
            for i in chunk:
                loss = (_eagle_loss(head, train[i], settings, spread, gen) if eagle else
                        _medusa_loss(head, train[i])) / len(chunk)
                if loss.requires_grad:
                    loss.backward()
                losses.append(float(loss.detach()) * len(chunk))
            torch.nn.utils.clip_grad_norm_(params, settings.clip)
            opt.step()
            sched.step()
            report.steps += 1
            if progress is not None:
                progress(len(chunk), sum(losses[-len(chunk):]) / len(chunk))
        head.eval()
        report.loss.append(sum(losses) / max(len(losses), 1))
        report.heldout.append(measure() if heldout else [])
        report.seconds += elapsed_s(clock, t0)
        t0 = clock.now_ns()
        if checkpoint is not None:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            tmp = checkpoint.with_suffix(".tmp")
            torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "gen": gen.get_state(), "report": report, "epoch": epoch + 1}, tmp)
            tmp.replace(checkpoint)
    return report
