"""`agenttrace.profile()`: `agenttrace run` for a block of code, in the running process.

    import agenttrace
    with agenttrace.profile():        # traces/profile-<time>.jsonl, the report printed at the end
        result = my_agent.run("...")

The first `profile()` of a process settles its tracing once: the global TracerProvider (the
program's own SDK provider when it has set one, else one of ours, made global), the installed
instrumentations turned on with it (the bootstrap's `instrument_installed` and `enable_native`,
the same code `agenttrace run` runs in a child: each is turned on when its library is first
imported, or at once if it is already). Each block then adds its own exporters through
a router processor and removes them at its end, so blocks may follow each other (or nest), each
with its own trace file and report, and spans ended outside every block go nowhere of ours.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from agenttrace.profiling.bootstrap import _agenttrace_instrument as instrumentations
from agenttrace.profiling.bootstrap import sitecustomize as boot
from agenttrace.profiling.program import trace_path, traces_url
from agenttrace.profiling.show import Format, show_report
from agenttrace.telemetry.exit import call_within
from agenttrace.telemetry.exporters import CountedBatchProcessor, GuardedExporter, otlp_exporter, trace_file_exporter
from agenttrace.telemetry.guard import FailureCounter

__all__ = ["Profile", "profile"]

_log = logging.getLogger(__name__)
LOCAL_QUEUE = 65_536  # the trace file's queue never drops a burst


@dataclass
class Profile:
    """One `profile()` block. trace_file: where its spans go; spans: how many were written
    (set when the block ends); instrumented: the instrumentations on in this process."""

    trace_file: Path
    instrumented: list[str] = field(default_factory=list)
    spans: int = 0


class _Router(SpanProcessor):
    """Hands every span to the processors of the blocks open now (none: the span goes nowhere of
    ours). Called on the thread that starts or ends the span; holds no lock while forwarding."""

    def __init__(self) -> None:
        self._targets: tuple[SpanProcessor, ...] = ()
        self._lock = threading.Lock()

    def add(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._targets = (*self._targets, processor)

    def remove(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._targets = tuple(t for t in self._targets if t is not processor)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for target in self._targets:
            target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in self._targets:
            target.on_end(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all([t.force_flush(timeout_millis) for t in self._targets])

    def shutdown(self) -> None:  # each block shuts its own processors down
        pass


@dataclass
class _Process:
    """This process's tracing, settled by the first `profile()`."""

    provider: Any
    router: _Router
    done: instrumentations.Instrumented  # updated as the program imports their libraries
    native: list[str]

    def on(self) -> list[str]:
        return [*self.done.on, *self.done.already, *self.native]


_process: _Process | None = None
_settle = threading.Lock()


def _settled(service: str | None) -> _Process:
    global _process
    with _settle:
        if _process is not None:
            return _process
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):  # the program traces already: record alongside it
            provider = current
        else:
            name = service or os.environ.get("OTEL_SERVICE_NAME") or boot.script_name()
            provider = boot.make_provider(name, uuid.uuid4().hex)
            trace.set_tracer_provider(provider)
            if trace.get_tracer_provider() is not provider:
                _log.warning("agenttrace.profile: the program set a tracer provider that is not the SDK's (%s); "
                             "the instrumentations record to ours, spans of libraries using the global one are not "
                             "in the trace file", type(current).__name__)
        router = _Router()
        provider.add_span_processor(router)
        done = instrumentations.instrument_installed(provider)
        native = instrumentations.enable_native(provider)
        _process = _Process(provider, router, done, native)
        return _process


@contextmanager
def profile(out: str | os.PathLike[str] = "traces", *, otlp: str | None = None, service: str | None = None,
            report: bool = True, format: Format = "terminal") -> Iterator[Profile]:  # noqa: A002 (the CLI's name)
    """Record the spans ended inside the block to `<out>/profile-<time>.jsonl` (and to the OTLP/HTTP
    collector at `otlp`, a base URL or a traces URL, when given), with every installed
    instrumentation turned on; at the end, however the block ends (an exception is re-raised
    after), flush and, with `report`, print the report of those spans (`format`: terminal,
    markdown or json). `service` names the service when this is the process's first profile()
    and the program has no tracer provider of its own. Telemetry failures are logged, never
    raised into the block."""
    state = _settled(service)
    result = Profile(trace_file=trace_path(Path(out), "profile"), instrumented=state.on())
    failures = FailureCounter()
    file_exporter = GuardedExporter(trace_file_exporter(result.trace_file), failures, f"file {result.trace_file}")
    local = CountedBatchProcessor(file_exporter, max_queue_size=LOCAL_QUEUE)
    remote = None
    if otlp:
        remote = CountedBatchProcessor(GuardedExporter(otlp_exporter(traces_url(otlp)), failures, f"OTLP {otlp}",
                                                       remote=True))
    for processor in (local, remote):
        if processor is not None:
            state.router.add(processor)
    try:
        yield result
    finally:
        for processor in (local, remote):
            if processor is not None:
                state.router.remove(processor)
        _close(local, remote, failures)
        result.spans = file_exporter.spans_exported
        result.instrumented = state.on()
        _finish(result, report, format)


def _close(local: CountedBatchProcessor, remote: CountedBatchProcessor | None, failures: FailureCounter) -> None:
    """The trace file in full; the collector for at most 3 s (what it has not taken by then is left)."""
    try:
        local.shutdown()
    except Exception as exc:  # telemetry never breaks the block's outcome
        failures.record("closing the trace file", exc)
    if remote is not None and not call_within(remote.shutdown, 3.0, "agenttrace-profile-otlp"):
        _log.warning("agenttrace.profile: the OTLP collector did not take every span within 3 s; the trace file has them")


def _finish(result: Profile, report: bool, fmt: Format) -> None:
    if not result.spans:
        path = result.trace_file
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()
        if report:
            print("agenttrace.profile: no spans were recorded in the block: no installed instrumentation saw a call "
                  f"(on in this process: {', '.join(result.instrumented) or 'none'})", file=sys.stderr)
        return
    if report:
        try:
            show_report(result.trace_file, fmt)
        except Exception as exc:  # the report must not replace the block's own outcome
            print(f"agenttrace.profile: the report of {result.trace_file} failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
