"""`agenttrace train-drafter` end to end: answer the prompts, record the features, choose the
draft vocabulary, train each head kind, measure it on the held-out split and write its file
with the recipe that made it. Every stage resumes from what an interrupted run left in the data
folder (answers, feature shards, a checkpoint per head kind)."""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.training.fit import FitSettings

__all__ = ["TrainOptions", "TrainResult", "train_drafter", "DATA_RECIPE"]

# Bumped when what the data stage produces changes: a new folder, not stale shards.
DATA_RECIPE = 1
# A smaller draft vocabulary is kept when the held-out acceptance summed over depths drops by no
# more than this (about that much in mean acceptance length).
SHRINK_TOLERANCE = 0.005


@dataclass(frozen=True)
class TrainOptions:
    """What `train-drafter` does. `model` None is the bundled model."""

    model: str | None = None
    kinds: tuple[str, ...] = ("eagle", "medusa")
    draft_vocab: int = 8192
    medusa_depth: int = 4
    batch_size: int = 8
    threads: int | None = None
    data_dir: Path | None = None  # default: <cache>/drafter-data/<target fingerprint>-r<DATA_RECIPE>
    out_dir: Path | None = None  # default: <cache>/heads
    int8: bool = True  # also write each head with int8 weights
    samples: int = 0  # sampled answers per training prompt besides the greedy one (more, varied text)
    temperature: float = 0.8  # of the sampled answers
    limit: int | None = None  # at most this many prompts (a quick run; the shipped heads use all)
    command: str = ""  # the command line that asked for this run, kept in the heads' recipe
    fit: FitSettings = field(default_factory=FitSettings)


@dataclass
class TrainResult:
    """What a run wrote and measured: per head kind its files, its held-out greedy acceptance by
    depth (fp32 and int8 head), the draft vocabulary's coverage and the time each stage took."""

    files: dict[str, list[str]]
    heldout: dict[str, list[float]]
    heldout_int8: dict[str, list[float]]
    heldout_full_vocab: dict[str, list[float]]  # the same heads scoring the whole vocabulary
    coverage: float
    seconds: dict[str, float]
    sequences: dict[str, int]
    tokens: dict[str, int]


def _default_data_dir(target: str) -> Path:
    from agenttrace.generation.models import cache_dir

    return cache_dir() / "drafter-data" / f"{target}-r{DATA_RECIPE}"


def default_heads_dir() -> Path:
    from agenttrace.generation.models import cache_dir

    return cache_dir() / "heads"


def _new_head(kind: str, model, opts: TrainOptions, draft_vocab: int):
    from agenttrace.generation.heads import HeadConfig, MedusaHeads, init_eagle

    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if kind == "eagle":
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", getattr(c, "rope_theta", 10000.0))
        config = HeadConfig("eagle", c.hidden_size, c.vocab_size, draft_vocab, c.num_attention_heads,
                            c.num_key_value_heads or c.num_attention_heads, head_dim, c.intermediate_size,
                            float(theta), float(c.rms_norm_eps))
        return init_eagle(config, opts.fit.seed)
    config = HeadConfig("medusa", c.hidden_size, c.vocab_size, draft_vocab, depth=opts.medusa_depth)
    return MedusaHeads(config)


def _checkpoint_name(kind: str, opts: TrainOptions, draft_ids) -> str:
    """A checkpoint belongs to one kind, shape, vocabulary and training setting: another run's
    is never resumed by mistake."""
    key = json.dumps([kind, asdict(opts.fit), opts.medusa_depth, draft_ids.tolist()])
    return f"checkpoint-{kind}-{_digest(key)}.pt"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def train_drafter(opts: TrainOptions, console=None) -> TrainResult:
    """Run every stage (module docstring) and return what was written and measured."""
    import torch
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from agenttrace.generation.head_drafters import bind_to
    from agenttrace.generation.head_files import fingerprint, load_head, save_head
    from agenttrace.generation.local import encode_chat
    from agenttrace.generation.models import load_model
    from agenttrace.training import data as datamod
    from agenttrace.training.corpus import training_prompts
    from agenttrace.training.fit import eagle_acceptance, fit, medusa_acceptance, vocab_coverage

    console = console or Console(stderr=True)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    seconds: dict[str, float] = {}
    clock = default_clock()
    t = clock.now_ns()
    loaded = load_model(opts.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    target = fingerprint(model)
    folder = opts.data_dir or _default_data_dir(target)
    out_dir = opts.out_dir or default_heads_dir()
    seconds["load"] = elapsed_s(clock, t)
    prompts = training_prompts()[: opts.limit] if opts.limit else training_prompts()
    encoded = [(p.id, p.source, p.split, encode_chat(tokenizer, p.messages), p.max_tokens) for p in prompts]
    eos = {tokenizer.eos_token_id, *([model.generation_config.eos_token_id] if isinstance(
        model.generation_config.eos_token_id, int) else (model.generation_config.eos_token_id or []))}
    eos.discard(None)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        t = clock.now_ns()
        task = progress.add_task("answering the prompts (batched, greedy)", total=len(encoded))
        records = datamod.answer_prompts(model, encoded, folder / "answers.jsonl", eos=eos, pad=pad,
                                         batch_size=opts.batch_size, progress=lambda n: progress.advance(task, n))
        wanted = {e[0] for e in encoded}
        # sampled answers of the training prompts (never of held-out ones: acceptance there is greedy's)
        extra = [(f"{pid}#s{i}", src, split, ids, budget) for i in range(1, opts.samples + 1)
                 for pid, src, split, ids, budget in encoded if split == "train"]
        if extra:
            task = progress.add_task(f"sampling {opts.samples} more answer(s) per training prompt", total=len(extra))
            records = datamod.answer_prompts(model, extra, folder / "answers-sampled.jsonl", eos=eos, pad=pad,
                                             batch_size=opts.batch_size, temperature=opts.temperature,
                                             seed=opts.fit.seed, progress=lambda n: progress.advance(task, n)) | records
            wanted |= {e[0] for e in extra}
        records = {k: v for k, v in records.items() if k in wanted}
        seconds["answer"] = elapsed_s(clock, t)
        t = clock.now_ns()
        task = progress.add_task("recording the target's features", total=len(records))
        # the shards are numbered over this set of sequences: another set gets its own folder
        shards = folder / f"features-{_digest(' '.join(sorted(records)))}"
        datamod.record_features(model, records, shards, progress=lambda n: progress.advance(task, n))
        seconds["features"] = elapsed_s(clock, t)
    seqs = datamod.load_sequences(shards)
    train = [s for s in seqs if s.split == "train"]
    heldout = [s for s in seqs if s.split == "heldout"]
    from agenttrace.training.fit import choose_draft_vocab

    draft_ids = choose_draft_vocab(train, opts.draft_vocab, sorted(eos), vocab=int(model.config.vocab_size))
    coverage = vocab_coverage(heldout, draft_ids)
    console.print(f"data: {len(train)} training and {len(heldout)} held-out sequences in {folder}; "
                  f"draft vocabulary {len(draft_ids)} tokens, covering {coverage:.1%} of held-out answer tokens")
    files: dict[str, list[str]] = {}
    accept: dict[str, list[float]] = {}
    accept8: dict[str, list[float]] = {}
    full: dict[str, list[float]] = {}
    for kind in opts.kinds:
        head = _new_head(kind, model, opts, len(draft_ids))  # (fewer than asked when the data has fewer tokens)
        head.draft_ids = draft_ids.clone()
        bind_to(head, model)
        steps = (len(train) + opts.fit.accumulate - 1) // opts.fit.accumulate * opts.fit.epochs
        t = clock.now_ns()
        with Progress(*columns, TextColumn("loss {task.fields[loss]:.3f}"), console=console) as progress:
            task = progress.add_task(f"training the {kind} head", total=steps * opts.fit.accumulate, loss=0.0)
            report = fit(head, train, heldout, opts.fit, checkpoint=folder / _checkpoint_name(kind, opts, draft_ids),
                         progress=lambda n, loss: progress.update(task, advance=n, loss=loss))
        seconds[f"train {kind}"] = elapsed_s(clock, t)
        depth = opts.fit.unroll + 1 if kind == "eagle" else opts.medusa_depth
        measure = eagle_acceptance if kind == "eagle" else medusa_acceptance
        accept[kind] = report.heldout[-1] if report.heldout else measure(head, heldout, depth)
        # what the reduced vocabulary costs: the same head scoring the target's whole table, and
        # a quarter and a half of its rows; the smallest that keeps the acceptance is kept (every
        # draft step scores those rows: their bytes are about half a step's)
        vocab_size = int(model.config.vocab_size)
        trials = {len(draft_ids): accept[kind]}
        kept = draft_ids
        for size in (vocab_size, len(draft_ids) // 4, len(draft_ids) // 2):
            ids = torch.arange(vocab_size) if size == vocab_size else \
                choose_draft_vocab(train, size, sorted(eos), vocab=vocab_size)
            head.draft_ids = ids
            bind_to(head, model)
            trials[size] = measure(head, heldout, depth)
            if size < len(kept) and sum(trials[size]) >= sum(accept[kind]) - SHRINK_TOLERANCE:
                kept = ids
                break
        full[kind] = trials[vocab_size]
        accept[kind] = trials[len(kept)]
        head.draft_ids = kept.clone()
        head.config = replace(head.config, draft_vocab=len(kept))
        bind_to(head, model)
        recipe = {
            "command": opts.command,
            "options": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()
                           if k not in ("fit", "command")},
                        "fit": asdict(opts.fit)},
            "data": {"recipe": DATA_RECIPE, "prompts": len(encoded), "sampled_per_prompt": opts.samples,
                     "sample_temperature": opts.temperature, "train_sequences": len(train),
                     "heldout_sequences": len(heldout), "train_tokens": int(sum(len(s.tokens) for s in train)),
                     "train_answer_tokens": int(sum(len(s.tokens) - s.prompt_len for s in train)),
                     "sources": sorted({s.source for s in seqs})},
            "draft_vocab": len(kept), "draft_vocab_trained": len(draft_ids),
            "draft_vocab_coverage": vocab_coverage(heldout, kept),
            "heldout_acceptance_by_draft_vocab": {str(k): v for k, v in sorted(trials.items())},
            "heldout_acceptance_by_depth": accept[kind],
            "heldout_acceptance_by_depth_full_vocab": full[kind],
            "train_seconds": report.seconds, "steps": report.steps, "loss_by_epoch": report.loss,
            "heldout_by_epoch": report.heldout,
            "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
                       f"{torch.get_num_threads()} threads",
        }
        name = loaded.name
        paths = [out_dir / f"{name}.{kind}.safetensors"]
        save_head(head, paths[0], target, recipe)
        if opts.int8:
            paths.append(out_dir / f"{name}.{kind}-int8.safetensors")
            save_head(head, paths[1], target, recipe, int8=True)
            head8 = load_head(paths[1]).head
            bind_to(head8, model)
            accept8[kind] = measure(head8, heldout, depth)
        files[kind] = [str(p) for p in paths]
        console.print(f"{kind} ({len(kept)}-token draft vocabulary): held-out greedy acceptance by depth "
                      f"{', '.join(f'{a:.2f}' for a in accept[kind])}"
                      + (f" (int8 head: {', '.join(f'{a:.2f}' for a in accept8[kind])})" if kind in accept8 else "")
                      + f" (whole vocabulary: {', '.join(f'{a:.2f}' for a in full[kind])})"
                      + f"; wrote {', '.join(files[kind])}")
    return TrainResult(files, accept, accept8, full, coverage, seconds,
                       {"train": len(train), "heldout": len(heldout)},
                       {"train": int(sum(len(s.tokens) for s in train)), "heldout": int(sum(len(s.tokens) for s in heldout))})


def result_json(result: TrainResult) -> str:
    return json.dumps(asdict(result), indent=2)
