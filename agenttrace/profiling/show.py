"""The report printed when a profiled program or block ends: what `agenttrace report FILE`
prints for its trace file, in the format asked for."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

__all__ = ["FORMATS", "Format", "show_report"]

Format = Literal["terminal", "markdown", "json"]
FORMATS: tuple[Format, ...] = ("terminal", "markdown", "json")


def show_report(path: Path, fmt: Format = "terminal", output: str | None = None) -> bool:
    """Print the report of one trace file (read as `agenttrace report` reads files) to stdout,
    or write it to `output` (whole or not at all). False, with the reason on stderr, when the
    file held no usable span or `output` could not be written; a report is never allowed to
    raise into the program it followed."""
    from agenttrace.report.build import report_streamed

    try:
        report = report_streamed([str(path)])
    except Exception as exc:  # a damaged file: say so, the program's own outcome stands
        print(f"agenttrace: no report of {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return False
    if not sum(i.spans for i in report.inputs):
        why = report.problems[0] if report.problems else "no spans in it"
        print(f"agenttrace: nothing to report from {path}: {why}", file=sys.stderr)
        return False
    if fmt == "json":
        text = report.model_dump_json(indent=2)
    elif fmt == "markdown":
        from agenttrace.report.markdown import report_markdown

        text = report_markdown(report)
    else:
        from agenttrace.report.terminal import make_console, plain_text, render_report

        if output is None:
            render_report(report, make_console())
            return True
        text = plain_text(lambda console: render_report(report, console))
    from agenttrace.telemetry.files import write_output

    # whole or not at all: a full or read-only disk leaves one line, not a torn report
    return write_output(text, output, None) == 0
