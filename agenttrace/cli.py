"""`agenttrace` command line: subcommands live in `agenttrace.commands`, one module each. Only the
command being run is imported and registered (its parser, its options): `agenttrace report` pays
for no bench module. Help, or a name that is not built in, registers them all, plug-ins included."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from importlib.metadata import entry_points

from agenttrace.commands import COMMANDS, ENTRY_POINT_GROUP

log = logging.getLogger(__name__)


def _command_named(argv: list[str]) -> str | None:
    """The subcommand `argv` runs: its first word that is not an option (the top level has only
    flags), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv` (None: every command's)."""
    parser = argparse.ArgumentParser(prog="agenttrace", description="Agent-loop latency tracer and profiler.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    name = _command_named(argv) if argv is not None else None
    if name in COMMANDS:
        importlib.import_module(COMMANDS[name]).register(sub)
        return parser
    plugins = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    named = [ep for ep in plugins if ep.name == name]
    for ep in named or plugins:
        _register_plugin(ep, sub)
    if named:
        return parser
    for module in COMMANDS.values():
        importlib.import_module(module).register(sub)
    return parser


def _register_plugin(ep, sub: argparse._SubParsersAction) -> None:
    try:
        ep.load()(sub)
    except Exception as exc:  # a broken plug-in must not take the built-in commands down
        log.warning("agenttrace: command %r from %s not loaded (%s: %s); the other commands work",
                    ep.name, ep.value, type(exc).__name__, exc)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
