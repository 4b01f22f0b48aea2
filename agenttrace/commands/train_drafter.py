"""`agenttrace train-drafter`: train the project's draft heads (EAGLE, Medusa) on a target model
by self-distillation (agenttrace/training/)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-drafter", help="train EAGLE and Medusa draft heads on a model's own answers "
                                             "(resumable; the bundled model's heads ship with agenttrace)")
    p.add_argument("--model", default=None, help="bundled (default), a folder or a hub name")
    p.add_argument("--kind", default="eagle,medusa", help="comma-separated head kinds: eagle, medusa (default both)")
    p.add_argument("--draft-vocab", type=int, default=8192, help="target tokens a head may propose (default 8192)")
    p.add_argument("--medusa-depth", type=int, default=4, help="Medusa heads: tokens t+2 .. t+1+depth (default 4)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default 10)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    p.add_argument("--unroll", type=int, default=None, help="EAGLE: drafting depths trained (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation, the order and the noise (default 0)")
    p.add_argument("--samples", type=int, default=0,
                   help="sampled answers per training prompt besides the greedy one (default 0)")
    p.add_argument("--temperature", type=float, default=0.8, help="temperature of the sampled answers (default 0.8)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts answered at once (default 8)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts (a quick trial)")
    p.add_argument("--data", type=Path, default=None, help="the data folder (default: under the agenttrace cache)")
    p.add_argument("--out", type=Path, default=None, help="where the head files go (default: <cache>/heads, "
                                                         "where the demo and the bench look first)")
    p.add_argument("--no-int8", action="store_true", help="do not also write int8 copies of the heads")
    p.add_argument("--json", action="store_true", help="print what was written and measured as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from agenttrace.errors import ModelUnavailable
    from agenttrace.training.fit import FitSettings
    from agenttrace.training.train import TrainOptions, result_json, train_drafter

    kinds = tuple(k.strip() for k in args.kind.split(",") if k.strip())
    bad = [k for k in kinds if k not in ("eagle", "medusa")]
    if bad or not kinds:
        print(f"agenttrace train-drafter: unknown head kind(s) {', '.join(bad) or '(none)'}; choose eagle, medusa",
              file=sys.stderr)
        return 2
    fit = FitSettings(seed=args.seed)
    for name in ("epochs", "lr", "unroll"):
        if getattr(args, name) is not None:
            fit = replace(fit, **{name: getattr(args, name)})
    opts = TrainOptions(model=args.model, kinds=kinds, draft_vocab=args.draft_vocab, medusa_depth=args.medusa_depth,
                        batch_size=args.batch_size, threads=args.threads, data_dir=args.data, out_dir=args.out,
                        samples=args.samples, temperature=args.temperature,
                        int8=not args.no_int8, limit=args.limit, fit=fit,
                        command=shlex.join(["agenttrace", "train-drafter", *sys.argv[2:]]))
    try:
        result = train_drafter(opts)
    except ModelUnavailable as exc:
        print(f"agenttrace train-drafter: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agenttrace train-drafter: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    if args.json:
        print(result_json(result))
    return 0
