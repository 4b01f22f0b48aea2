"""`agenttrace` command line. Subcommands import what they need when they run, so `report`
never imports torch."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _demo(args: argparse.Namespace) -> int:
    from agents.demo import ARMS, DemoOptions, run_demo

    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"agenttrace demo: unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    opts = DemoOptions(
        tasks=args.tasks,
        arms=arms,
        num_speculative_tokens=args.k,
        trace_dir=Path(args.trace_dir),
        otlp_endpoint=args.otlp,
        detail=args.detail,
        show_tasks=not args.summary_only,
    )
    run_demo(opts)
    return 0


def _report(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenttrace", description="Agent-loop latency tracer and profiler.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the reference agent on the bundled model, write a trace, print the report")
    demo.add_argument("--tasks", type=int, default=12, help="how many tasks of the task set to run (default 12)")
    demo.add_argument(
        "--arms", default="speculative",
        help="comma-separated: baseline (plain decoding), speculative (prompt lookup); "
        "several arms run interleaved and are compared (default speculative)",
    )
    demo.add_argument("-k", type=int, default=3, help="draft tokens per speculation round (default 3)")
    demo.add_argument("--trace-dir", default="traces", help="where trace files go (default traces/)")
    demo.add_argument(
        "--otlp", nargs="?", const="", default=None, metavar="URL",
        help="also export over OTLP (default http://localhost:4318; OTEL_EXPORTER_OTLP_* apply)",
    )
    demo.add_argument("--detail", choices=("default", "fine"), default="default",
                      help="fine: draft/verify spans per round instead of span events")
    demo.add_argument("--summary-only", action="store_true", help="print only the run summary")
    demo.set_defaults(func=_demo)

    report = sub.add_parser("report", help="per-step latency report of trace files (OTLP/JSON lines)")
    report.add_argument("paths", nargs="+", help="trace files or folders")
    report.add_argument("--format", choices=("terminal", "json"), default="terminal")
    report.add_argument("--summary-only", action="store_true", help="print only the run summary")
    report.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
