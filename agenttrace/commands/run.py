"""`agenttrace run [options] -- COMMAND...`: run a program with tracing set up in it, then
print the per-step report of what it recorded (agenttrace/profiling says how)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run", help="run an agent program with its installed instrumentations on; print the report when it exits",
        description="Run COMMAND (e.g. python my_agent.py) with OpenTelemetry set up in its Python processes and "
                    "every installed instrumentation turned on; write its spans to DIR/run-<time>.jsonl and print "
                    "the report when it exits (an exception and Ctrl-C included); exit with its exit status. "
                    "Its environment needs opentelemetry-exporter-otlp-proto-http and the instrumentation of its "
                    "framework.",
        usage="agenttrace run [--out DIR] [--otlp [URL]] [--service NAME] [--format F] [-o FILE] -- COMMAND...")
    run.add_argument("--out", default="traces", metavar="DIR", help="where the trace file goes (default ./traces)")
    run.add_argument("--otlp", nargs="?", const="", metavar="URL",
                     help="also export to this OTLP/HTTP collector (a bare --otlp: OTEL_EXPORTER_OTLP_ENDPOINT, "
                          "else Jaeger's http://localhost:4318)")
    run.add_argument("--service", help="service.name of the program's spans (default: OTEL_SERVICE_NAME, else the "
                                       "script's name)")
    run.add_argument("--format", choices=("terminal", "markdown", "json"), default="terminal",
                     help="the report's format (as `agenttrace report`)")
    run.add_argument("-o", "--output", help="write the report to this file instead of standard output")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments, after --")
    run.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from agenttrace.errors import ProgramNotFound
    from agenttrace.profiling.program import run_traced
    from agenttrace.profiling.show import show_report
    from agenttrace.telemetry.exporters import resolve_otlp_endpoint

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    otlp = None
    if args.otlp is not None:
        otlp, _ = resolve_otlp_endpoint(args.otlp, "http/protobuf")  # type: ignore[misc]
    try:
        result = run_traced(command, out_dir=Path(args.out), otlp=otlp, service=args.service)
    except ProgramNotFound as exc:
        print(f"agenttrace run: {exc}", file=sys.stderr)
        return 127
    if result.trace_file is None:
        print(f"agenttrace run: no spans came from `{' '.join(command)}` (exit status {result.exit_code}): the "
              "program ran untraced (a line above says why when its Python lacks the OpenTelemetry exporter), "
              "made no call an installed instrumentation covers, or its Python ran with -S, -I or -E",
              file=sys.stderr)
        return result.exit_code
    print(f"agenttrace run: {result.spans:,} spans from {', '.join(result.services) or 'the program'} in "
          f"{result.trace_file} (exit status {result.exit_code})", file=sys.stderr)
    shown = show_report(result.trace_file, args.format, args.output)
    if args.output and not shown and result.exit_code == 0:
        return 1  # the report asked for is not in the file (the line above says why)
    return result.exit_code
