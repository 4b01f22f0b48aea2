"""`agenttrace report`: the per-step latency report of recorded traces (no torch on this path)."""

from __future__ import annotations

import argparse
import sys

FORMATS = ("terminal", "markdown", "json", "html")


def register(sub: argparse._SubParsersAction) -> None:
    from agenttrace.commands.options import add_input_options

    report = sub.add_parser(
        "report", help="per-step latency report of traces (OTLP/JSON or Jaeger JSON files, or Jaeger's query API)")
    report.add_argument("paths", nargs="*", help="trace files or folders")
    report.add_argument("--format", choices=FORMATS, default="terminal")
    report.add_argument("-o", "--output", help="write to this file instead of standard output (html: default report.html)")
    report.add_argument("--summary-only", action="store_true", help="print only the run summary")
    report.add_argument("--waterfalls", type=int, default=50,
                        help="html: how many tasks get a waterfall chart to choose from (default 50)")
    report.add_argument("--json-schema", action="store_true", help="print the JSON schema of --format json and exit")
    add_input_options(report)
    report.set_defaults(func=run)


def write_output(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def nothing_usable(loaded, sources: list[str]) -> str | None:
    """The one-line reason when the inputs gave no span at all (exit 2), else None: a file of
    random bytes is an error, not an empty report."""
    if loaded.spans:
        return None
    why = loaded.problems[0] if loaded.problems else "no spans in them"
    more = f" (and {len(loaded.problems) - 1} more problems)" if len(loaded.problems) > 1 else ""
    return f"nothing to report from {', '.join(sources)}: {why}{more}"


def run(args: argparse.Namespace) -> int:
    import json

    from agenttrace.commands.options import jaeger_query
    from agenttrace.report.build import report_from_load
    from agenttrace.report.model import Report
    from agenttrace.traces.load import InputError, load_inputs

    if args.json_schema:
        print(json.dumps(Report.model_json_schema(), indent=2))
        return 0
    try:
        loaded, sources = load_inputs(args.paths, jaeger_query(args))
    except InputError as exc:
        print(f"agenttrace report: {exc}", file=sys.stderr)
        return 2
    empty = nothing_usable(loaded, sources)
    if empty is not None:
        print(f"agenttrace report: {empty}", file=sys.stderr)
        return 2
    waterfalls = args.waterfalls if args.format == "html" else 0
    report = report_from_load(loaded, sources, waterfalls=waterfalls)
    if args.format == "json":
        write_output(report.model_dump_json(indent=2), args.output)
    elif args.format == "markdown":
        from agenttrace.report.markdown import report_markdown

        write_output(report_markdown(report, tasks=not args.summary_only), args.output)
    elif args.format == "html":
        from agenttrace.report.html import report_html

        write_output(report_html(report), args.output or "report.html")
    else:
        from agenttrace.report.terminal import make_console, render_report

        render_report(report, make_console(), tasks=not args.summary_only)
    return 0
