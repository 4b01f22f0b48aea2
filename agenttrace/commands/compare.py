"""`agenttrace compare A B`: B against A, figure by figure, ratio of medians with a bootstrap 95%
interval (noise when it contains 1.0). A and B are two trace files (or folders), or two
`agenttrace.run.label` values of the traces named with --in (or read with --jaeger)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from agenttrace.commands.input_options import add_input_options

    cmp = sub.add_parser("compare", help="compare two runs (files, or run labels) figure by figure, noise vs gain")
    cmp.add_argument("a", help="run A: a trace file or folder, or a run label (with --in / --jaeger)")
    cmp.add_argument("b", help="run B, likewise")
    cmp.add_argument("--in", dest="inputs", nargs="+", default=[], metavar="PATH",
                     help="trace files or folders holding both runs; A and B are then run labels")
    cmp.add_argument("--format", choices=("terminal", "markdown", "json", "html"), default="terminal")
    cmp.add_argument("-o", "--output", help="write to this file (html: default compare.html)")
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    cmp.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    add_input_options(cmp)
    cmp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agenttrace.commands.input_options import jaeger_query
    from agenttrace.commands.report import nothing_usable
    from agenttrace.errors import InputError
    from agenttrace.report.build import report_from_load
    from agenttrace.report.compare import compare_labels, compare_reports
    from agenttrace.telemetry.files import write_output
    from agenttrace.traces.load import load_inputs

    waterfalls = 50 if args.format == "html" else 0
    opts = {"seed": args.seed, "resamples": args.resamples}
    try:
        query = jaeger_query(args)
        if args.inputs or query is not None or not (Path(args.a).exists() and Path(args.b).exists()):
            if not args.inputs and query is None:
                raise InputError(f"{args.a!r} and {args.b!r} are not both files or folders; to compare run labels, "
                                 "name the traces with --in PATH... (or --jaeger URL --service NAME)")
            loaded, sources = load_inputs(args.inputs, query)
            _usable(nothing_usable(loaded, sources))
            report = report_from_load(loaded, sources, waterfalls=waterfalls)
            comparison = compare_labels(report, args.a, args.b, **opts)
        else:
            la, sa = load_inputs([args.a])
            lb, sb = load_inputs([args.b])
            _usable(nothing_usable(la, sa))
            _usable(nothing_usable(lb, sb))
            ra, rb = report_from_load(la, sa), report_from_load(lb, sb)
            comparison = compare_reports(ra, rb, a_name=_name(args.a, ra), b_name=_name(args.b, rb), **opts)
            report = None
    except (InputError, ValueError) as exc:
        print(f"agenttrace compare: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        return write_output(comparison.model_dump_json(indent=2), args.output, "compare")
    elif args.format == "markdown":
        from agenttrace.report.markdown import comparison_markdown

        return write_output(comparison_markdown(comparison), args.output, "compare")
    elif args.format == "html":
        from agenttrace.report.html import report_html

        if report is None:
            loaded, sources = load_inputs([args.a, args.b])
            report = report_from_load(loaded, sources, waterfalls=waterfalls)
        return write_output(report_html(report, comparison), args.output or "compare.html", "compare")
    else:
        from agenttrace.report.terminal import make_console, plain_text, render_comparison

        if args.output:
            return write_output(plain_text(lambda console: render_comparison(comparison, console)), args.output, "compare")
        render_comparison(comparison, make_console())
    return 0


def _usable(reason: str | None) -> None:
    """Raise InputError (exit 2) when an input gave no span at all."""
    from agenttrace.errors import InputError

    if reason is not None:
        raise InputError(reason)


def _name(path: str, report) -> str:
    """A run's name: its single run label, else the file name."""
    labels = {t.run_label for t in report.tasks}
    if len(labels) == 1 and None not in labels:
        return str(labels.pop())
    return Path(path).name
