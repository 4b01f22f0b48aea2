"""A finished SDK span built from parts (a file's record, or a copy with cut values) that reports
the dropped-attribute/event/link counts it is given rather than recomputing them, so exporters
encode exactly what the original recorded."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan


class SpanCopy(ReadableSpan):
    def __init__(self, *args: Any, dropped: tuple[int, int, int] = (0, 0, 0), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dropped = dropped  # attributes, events, links

    @property
    def dropped_attributes(self) -> int:
        return self._dropped[0]

    @property
    def dropped_events(self) -> int:
        return self._dropped[1]

    @property
    def dropped_links(self) -> int:
        return self._dropped[2]
