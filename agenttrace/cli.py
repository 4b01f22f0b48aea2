"""`agenttrace` command line: subcommands live in `agenttrace.commands`, one module each."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from importlib.metadata import entry_points

from agenttrace.commands import COMMANDS, ENTRY_POINT_GROUP

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenttrace", description="Agent-loop latency tracer and profiler.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plug-in must not take the built-in commands down
            log.warning("agenttrace: command %r from %s not loaded (%s: %s); the other commands work",
                        ep.name, ep.value, type(exc).__name__, exc)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
