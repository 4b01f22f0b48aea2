"""The spans being read, indexed by id and parent, for the edits that map other instrumentations'
traces onto ours (agenttrace.traces.normalise). Edits replace a record with a changed copy, so
the caller's records are never modified; the output keeps the input's order, added spans last."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from agenttrace import semconv as sc
from agenttrace.traces.span_records import SpanRecord

Key = tuple[str, str]


def key_of(span: SpanRecord) -> Key:
    return span.trace_id, span.span_id


class SpanIndex:
    """Spans by (trace id, span id) and children by parent. Of spans sharing an id the first is
    indexed (the report lists duplicates and renames the later ones); the others pass through."""

    def __init__(self, spans: Iterable[SpanRecord]) -> None:
        self.spans: list[SpanRecord] = list(spans)
        self._pos: dict[Key, int] = {}
        self._kids: dict[Key, list[Key]] = defaultdict(list)
        for i, s in enumerate(self.spans):
            self._pos.setdefault(key_of(s), i)
        for key, i in self._pos.items():
            s = self.spans[i]
            if s.parent_id and s.parent_id != s.span_id:
                self._kids[(s.trace_id, s.parent_id)].append(key)

    def __iter__(self) -> Iterator[SpanRecord]:
        return (self.spans[i] for i in self._pos.values())

    def get(self, key: Key) -> SpanRecord | None:
        i = self._pos.get(key)
        return self.spans[i] if i is not None else None

    def current(self, span: SpanRecord) -> SpanRecord:
        """The latest version of `span` (after edits)."""
        return self.get(key_of(span)) or span

    def parent(self, span: SpanRecord) -> SpanRecord | None:
        if not span.parent_id or span.parent_id == span.span_id:
            return None
        return self.get((span.trace_id, span.parent_id))

    def children(self, span: SpanRecord) -> list[SpanRecord]:
        """In start order (stable: equal starts keep file order)."""
        kids = [self.spans[self._pos[k]] for k in self._kids.get(key_of(span), ())]
        kids.sort(key=lambda s: s.start_ns)
        return kids

    def ancestors(self, span: SpanRecord) -> list[SpanRecord]:
        """Parent first, up to the root; stops at a cycle."""
        out: list[SpanRecord] = []
        seen = {key_of(span)}
        p = self.parent(span)
        while p is not None and key_of(p) not in seen:
            seen.add(key_of(p))
            out.append(p)
            p = self.parent(p)
        return out

    def walk(self, span: SpanRecord, into: Callable[[SpanRecord], bool] | None = None) -> Iterator[SpanRecord]:
        """The span's descendants (not itself), depth first, in start order; each visited once
        (cycles end). `into(s)` False: `s` is yielded but its subtree is not."""
        seen = {key_of(span)}
        stack = list(reversed(self.children(span)))
        while stack:
            s = stack.pop()
            if key_of(s) in seen:
                continue
            seen.add(key_of(s))
            yield s
            if into is None or into(s):
                stack.extend(reversed(self.children(s)))

    def update(self, span: SpanRecord, **changes: Any) -> SpanRecord:
        """Replace `span` with a copy carrying `changes` (a new `parent_id` moves it)."""
        key = key_of(span)
        i = self._pos[key]
        old = self.spans[i]
        new = dataclasses.replace(old, **changes)
        self.spans[i] = new
        if new.parent_id != old.parent_id:
            if old.parent_id:
                siblings = self._kids.get((old.trace_id, old.parent_id))
                if siblings is not None and key in siblings:
                    siblings.remove(key)
            if new.parent_id:
                self._kids[(new.trace_id, new.parent_id)].append(key)
        return new

    def with_attributes(self, span: SpanRecord, attrs: dict[str, Any], **changes: Any) -> SpanRecord:
        """A copy whose attributes are the span's plus `attrs` (which win)."""
        return self.update(span, attributes={**self.current(span).attributes, **attrs}, **changes)

    def drop_segment(self, span: SpanRecord) -> SpanRecord:
        """A copy with no `agenttrace.segment`: the span becomes a grouping span (transparent for
        the structure, its self time other)."""
        current = self.current(span)
        return self.update(current, attributes={k: v for k, v in current.attributes.items() if k != sc.SEGMENT})

    def add_synthetic(self, template: SpanRecord, span_id: str, parent_id: str | None, name: str, start_ns: int,
                      end_ns: int, attributes: dict[str, Any]) -> SpanRecord:
        """Add a span the reading infers (a step, an attempt, a part of a remote call), in the
        trace, resource and input of `template`."""
        return self.add(SpanRecord(template.trace_id, span_id, parent_id, name, "INTERNAL", start_ns, end_ns, attributes,
                                   (), "UNSET", "", template.resource, (), template.source, ""))

    def add(self, span: SpanRecord) -> SpanRecord:
        key = key_of(span)
        self._pos[key] = len(self.spans)
        self.spans.append(span)
        if span.parent_id:
            self._kids[(span.trace_id, span.parent_id)].append(key)
        return span
