"""Spans and their export. No torch here: exporters and span helpers stay light.

    spans.py       the span context manager every instrumented stage uses (clock-driven times)
    guard.py       telemetry never breaks the agent: failures are logged and counted
    exporters.py   trace file (OTLP/JSON lines) and OTLP endpoint exporters, guarded
    files.py       files written whole on a full or read-only disk: the trace file's lines, -o outputs
    generation_attributes.py  a `Generation` record -> generation span attributes, prefill child, rounds
    truncation.py  attribute values over the length limit truncated on export
    setup.py       `Telemetry`: one run's tracer provider, resource and exporters
"""

from agenttrace.telemetry.setup import Detail, Telemetry

__all__ = ["Detail", "Telemetry"]
