"""Benchmarks: each module measures one thing side by side in one run and prints a table of
ratios (speed targets are checked here, never by timed tests). Each module defines
`register(subparsers)` for its `agenttrace bench <name>` subcommand; list it in `BENCHES`."""

BENCHES: tuple[str, ...] = (
    "agenttrace.bench.generation",
    "agenttrace.bench.report",
    "agenttrace.bench.harness",
    "agenttrace.bench.verify_cost",
    "agenttrace.bench.overhead",
    "agenttrace.bench.grammar",
)
