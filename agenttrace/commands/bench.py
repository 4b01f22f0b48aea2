"""`agenttrace bench <name>`: the benchmarks of `agenttrace.bench`, one subcommand each."""

from __future__ import annotations

import argparse
import importlib

from agenttrace.bench import BENCHES


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print tables of ratios measured side by side")
    group = bench.add_subparsers(dest="bench", required=True)
    for name in BENCHES:
        importlib.import_module(name).register(group)
