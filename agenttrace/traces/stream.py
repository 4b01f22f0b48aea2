"""Trace files read as a stream of whole traces, in bounded memory: the fast path of `report`.

Lines are decoded by msgspec into typed structs where they have our exporter's shape
(traces/otlp_fast.py), else parsed by msgspec (falling back to `jsontext.parse_json` for what it
refuses: NaN, 1e400, invalid UTF-8, lone surrogates; so every value and every problem is what
the one-pass loader gives) and read by the same `otlp_json` reader; then checked by the same
validation boundary, and buffered per trace. A trace is handed on once a root span of it (no
parent) has been read and `lag` lines have passed without another of its spans; the SDK exports
a span when it ends and a parent ends after its children, so a trace's root is its last span
and the lag only has to cover an exporter's batches written out of order. What is still open at
the end of the input is handed on then. A trace whose spans come later than the lag is analysed
as two (listed as a problem by the span tree: spans naming a parent not in the input).

Memory: the spans of the traces still open plus `lag` lines (for our exporter, the traces of the
agents running at once), and whatever the consumer keeps of each batch. Files that are not OTLP
JSON lines (Jaeger JSON, one pretty-printed document) are read whole by `traces.load` and join
the stream as they are. No torch import on this path.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from agenttrace.errors import JSONError, NotTyped
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.load import MAX_PROBLEMS_PER_FILE, iter_trace_files, load_file, spans_from_document
from agenttrace.traces.otlp_fast import decode_request
from agenttrace.traces.otlp_json import is_otlp_request, spans_from_request
from agenttrace.traces.span_records import SpanRecord, break_cycles, checked

__all__ = ["LAG_LINES", "Batch", "file_lines", "line_spans", "no_gc", "parse_line", "stream_traces"]

LAG_LINES = 16  # lines a finished trace waits for late spans (our exporter writes 512 spans a line)
BATCH_SPANS = 20_000  # spans per batch handed on: few enough to stay small, many enough to amortise


_GENERIC = msgspec.json.Decoder()


def _surrogate_escapes(line: bytes) -> bool:
    """Whether the line escapes a UTF-16 surrogate (`\\udXXX`): only parse_json reads a lone one
    as the one-pass loader does."""
    return b"\\u" in line and (b"\\ud" in line or b"\\uD" in line)


def parse_line(line: bytes):
    """One JSON document, as `parse_json` gives it (JSONError for what is not JSON we can hold).
    msgspec, not orjson: orjson reads an integer past 64 bits as a float (a 40-digit span id
    became `1e+41`), msgspec keeps it exact; what msgspec refuses (NaN, 1e400, invalid UTF-8)
    goes to parse_json, which gives its value or its error."""
    if _surrogate_escapes(line):
        return parse_json(line)  # parse_json replaces the lone ones
    try:
        return _GENERIC.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return parse_json(line)


@dataclass
class Batch:
    """Whole traces, each span's place in the input (`seq`, by span id), problems met reading."""

    spans: list[SpanRecord] = field(default_factory=list)
    seq: dict[int, int] = field(default_factory=dict)


@dataclass
class _Open:
    spans: list[SpanRecord] = field(default_factory=list)
    last_line: int = 0
    rooted: bool = False


class _Streamer:
    def __init__(self, lag: int, batch_spans: int, problems: list[str]) -> None:
        self.lag, self.batch_spans, self.problems = lag, batch_spans, problems
        self.open: dict[str, _Open] = {}
        self.ready: list[_Open] = []
        self.ready_spans = 0
        self.seq: dict[int, int] = {}
        self.count = 0  # spans read so far, over every file
        self.line = 0  # lines read so far, over every file

    def take(self, spans: list[SpanRecord]) -> None:
        line, open_ = self.line, self.open
        for s in spans:
            self.seq[id(s)] = self.count
            self.count += 1
            t = open_.get(s.trace_id)
            if t is None:
                t = open_[s.trace_id] = _Open()
            t.spans.append(s)
            t.last_line = line
            if s.parent_id is None:
                t.rooted = True

    def settle(self, final: bool = False) -> None:
        """Move the traces that are done to `ready`."""
        horizon = self.line - self.lag
        done = [k for k, t in self.open.items() if final or (t.rooted and t.last_line <= horizon)]
        for k in done:
            t = self.open.pop(k)
            self.ready.append(t)
            self.ready_spans += len(t.spans)

    def batch(self, final: bool = False) -> Batch | None:
        if not self.ready or (self.ready_spans < self.batch_spans and not final):
            return None
        out = Batch()
        for t in self.ready:
            for s in t.spans:
                out.spans.append(s)
                out.seq[id(s)] = self.seq.pop(id(s))
        self.ready, self.ready_spans = [], 0
        break_cycles(out.spans, self.problems)
        return out


def file_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, text) of each non-blank line: the lines a report reads, in order."""
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line


def _is_lines(path: Path) -> bool:
    """Whether the file is JSON lines (its first line a whole document), not one pretty-printed
    document (read whole by `traces.load`)."""
    for _, line in file_lines(path):
        try:
            parse_line(line)
            return True
        except JSONError:
            return False
    return True


def stream_traces(paths: Iterable[str | os.PathLike[str]], problems: list[str], *, lag: int = LAG_LINES,
                  batch_spans: int = BATCH_SPANS) -> Iterator[Batch]:
    """Batches of whole traces from the given trace files or folders, in about input order;
    what could not be read is appended to `problems` ("file:line: what"), as `load_spans` does."""
    st = _Streamer(lag, batch_spans, problems)
    for path in iter_trace_files(paths):
        kept = len(problems)
        if not path.is_file():
            problems.append(f"{path}: no such file")
            continue
        if not _is_lines(path):  # read whole, its problems capped there
            spans: list[SpanRecord] = []
            load_file(path, spans, problems)
            st.line += 1
            st.take(spans)
            continue
        for n, line in file_lines(path):
            st.line += 1
            where = f"{path}:{n}"
            try:
                read = line_spans(line, where, problems)
            except JSONError as exc:
                problems.append(f"{where}: {exc}; line skipped")
                continue
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
                text = str(exc)
                problems.append(f"{where}: malformed span data ({type(exc).__name__}: "
                                f"{text if len(text) <= 200 else text[:200] + '...'}); line skipped")
                continue
            st.take(checked(read, problems))
            st.settle()
            out = st.batch()
            if out is not None:
                yield out
        if len(problems) - kept > MAX_PROBLEMS_PER_FILE:
            extra = len(problems) - kept - MAX_PROBLEMS_PER_FILE
            del problems[kept + MAX_PROBLEMS_PER_FILE:]
            problems.append(f"{path}: {extra} more problems like those above (not listed)")
    st.settle(final=True)
    out = st.batch(final=True)
    if out is not None:
        yield out


def line_spans(line: bytes, where: str, problems: list[str]) -> list[SpanRecord]:
    """The spans of one line: through the typed decoder when the line has its shape, else parsed
    and read as `traces.load` reads it (all of a line, or none)."""
    if not _surrogate_escapes(line):
        try:
            return decode_request(line, where, problems)
        except NotTyped:
            pass
    doc = parse_line(line)
    if is_otlp_request(doc):
        return list(spans_from_request(doc, where, problems))
    return spans_from_document(doc, where, problems)


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block: loading and analysing allocate millions of
    objects that live on (spans, then figures), and each collection walks them all again (on 100k
    spans: load 4.0 -> 1.9 s, analysis 2.8 -> 1.9 s). Reference counting still frees the rest."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
