"""`agenttrace report`: the per-step latency report of recorded traces (no torch on this path)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="per-step latency report of trace files (OTLP/JSON lines)")
    report.add_argument("paths", nargs="+", help="trace files or folders")
    report.add_argument("--format", choices=("terminal", "json"), default="terminal")
    report.add_argument("--summary-only", action="store_true", help="print only the run summary")
    report.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agenttrace.report import report_from_files
    from agenttrace.report.terminal import make_console, render_report

    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        print(f"agenttrace report: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    report = report_from_files(args.paths)
    if args.format == "json":
        print(report.model_dump_json(indent=2))
    else:
        render_report(report, make_console(), tasks=not args.summary_only)
    return 0
