"""`agenttrace bench <name>`: the benchmarks of `agenttrace.bench`, one subcommand each; a bare
`agenttrace bench` runs the evaluation harness (`agenttrace bench run`)."""

from __future__ import annotations

import argparse
import importlib

from agenttrace.bench import BENCHES


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print tables of ratios measured side by side")
    group = bench.add_subparsers(dest="bench", required=False)
    for name in BENCHES:
        importlib.import_module(name).register(group)
    # no bench named: the harness, with its options on `bench` itself
    from agenttrace.bench.harness import add_options, run

    add_options(bench)
    bench.set_defaults(func=run)
