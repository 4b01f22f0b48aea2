"""The critical path as Jaeger's UI computes it, and the segment breakdown that follows it, on
hand-built span trees with exact times."""

from __future__ import annotations

import itertools

import pytest

from agenttrace.report.model import SEGMENT_FIELDS
from agenttrace.report.segments import breakdown
from agenttrace.report.span_tree import SpanTree, critical_path
from agenttrace.traces.span_records import SpanRecord

_ids = itertools.count(1)


def span(name, start, end, parent=None, segment=None, kind="INTERNAL", trace="t1", **attrs):
    attributes = dict(attrs)
    if segment:
        attributes["agenttrace.segment"] = segment
    return SpanRecord(trace, f"{next(_ids):016x}", parent.span_id if parent else None, name, kind, start, end,
                      attributes, source=f"hand:{name}")


def path(spans, root):
    return [(s.span.name, s.start_ns, s.end_ns) for s in critical_path(SpanTree(spans), root)]


def test_sequential_children_and_the_gaps_between_them():
    a = span("A", 0, 100)
    b, c = span("B", 10, 40, a), span("C", 50, 80, a)
    assert path([a, b, c], a) == [("A", 80, 100), ("C", 50, 80), ("A", 40, 50), ("B", 10, 40), ("A", 0, 10)]


def test_overlapping_child_that_finished_after_the_next_one_started_is_off_the_path():
    a = span("A", 0, 100)
    b, c = span("B", 10, 70, a), span("C", 50, 90, a)
    assert path([a, b, c], a) == [("A", 90, 100), ("C", 50, 90), ("A", 0, 50)]


def test_adjacent_children_the_earlier_is_not_on_the_path_as_in_jaeger():
    # Jaeger picks a child that ended *strictly* before the returning start time.
    a = span("A", 0, 30)
    b, c = span("B", 0, 10, a), span("C", 10, 30, a)
    assert path([a, b, c], a) == [("C", 10, 30), ("A", 0, 10)]


def test_children_overflowing_the_end_are_truncated_against_the_sanitised_parent():
    a = span("A", 0, 30)
    b = span("B", 15, 35, a)
    c = span("C", 20, 40, b)
    assert path([a, b, c], a) == [("C", 20, 30), ("B", 15, 20), ("A", 0, 15)]


def test_child_starting_before_its_parent_is_clipped_to_the_parent_start():
    a = span("A", 10, 50)
    b = span("B", 0, 20, a)
    assert path([a, b], a) == [("A", 20, 50), ("B", 10, 20)]


def test_children_outside_the_parent_are_dropped_with_their_subtree():
    a = span("A", 0, 10)
    late = span("late", 10, 20, a)  # starts exactly at the parent's end
    grandchild = span("g", 12, 14, late)
    early = span("early", -10, 0, a)  # ends exactly at the parent's start
    assert path([a, late, grandchild, early], a) == [("A", 0, 10)]


def test_consumer_under_producer_is_not_waited_for():
    a = span("A", 0, 10, kind="PRODUCER")
    b = span("B", 2, 20, a, kind="CONSUMER")
    c = span("C", 2, 4, a, kind="INTERNAL")
    assert path([a, b, c], a) == [("A", 4, 10), ("C", 2, 4), ("A", 0, 2)]


def test_equal_ends_the_earliest_starting_child_wins():
    a = span("A", 0, 10)
    b, c = span("B", 0, 10, a), span("C", 5, 10, a)
    assert path([a, c, b], a) == [("B", 0, 10)]


def test_path_climbs_back_and_descends_into_an_earlier_subtree():
    a = span("A", 0, 100)
    b = span("B", 0, 60, a)
    d = span("D", 10, 50, b)
    c = span("C", 70, 90, a)
    sections = path([a, b, d, c], a)
    assert sections == [("A", 90, 100), ("C", 70, 90), ("A", 60, 70), ("B", 50, 60), ("D", 10, 50), ("B", 0, 10)]
    # the sections tile the root's interval exactly
    assert sorted((s, e) for _, s, e in sections) == [(0, 10), (10, 50), (50, 60), (60, 70), (70, 90), (90, 100)]


def test_breakdown_follows_the_path_where_children_overlap_and_keeps_adjacent_predecessors():
    attempt = span("attempt 1", 0, 400, segment="attempt")
    gen = span("chat m", 0, 100, attempt, segment="generation")
    parse = span("parse_tool_call", 100, 110, attempt, segment="parse")
    tool_a = span("execute_tool a", 110, 300, attempt, segment="tool")
    tool_b = span("execute_tool b", 150, 400, attempt, segment="tool")
    spans = [attempt, gen, parse, tool_a, tool_b]
    b = breakdown(SpanTree(spans), attempt)
    seg = b.segments()
    assert (b.ns[SEGMENT_FIELDS.index("generation")], seg.parse, seg.tool, seg.other) == (100, pytest.approx(10e-9), pytest.approx(250e-9), pytest.approx(40e-9))
    assert b.total_ns() == 400
    assert b.overlap_segments().tool == pytest.approx(190e-9) and sum(b.overlap_ns) == 190
    # Jaeger's strict rule would leave the generation off the path and charge it to the attempt
    assert ("chat m", 0, 100) not in path(spans, attempt)


def test_breakdown_of_an_un_awaited_consumer_is_overlap():
    step = span("agent_step 1", 0, 100, segment="step", kind="PRODUCER")
    sub = span("invoke_agent sub", 10, 300, step, segment="delegation", kind="CONSUMER")
    b = breakdown(SpanTree([step, sub]), step)
    assert b.segments().other == pytest.approx(100e-9) and b.overlap_segments().delegation == pytest.approx(290e-9)


def test_tree_names_duplicates_orphans_and_children_outside_their_parent():
    a = span("A", 0, 10)
    dup = SpanRecord("t1", a.span_id, None, "again", "INTERNAL", 0, 5, {}, source="f.jsonl:3")
    orphan = SpanRecord("t1", "ffff000000000001", "eeee000000000001", "lost", "INTERNAL", 0, 5, {}, source="f.jsonl:4")
    out = span("out", 5, 15, a)
    tree = SpanTree([a, dup, orphan, out])
    assert dup.span_id == f"{a.span_id}_1" and tree.by_id[("t1", dup.span_id)] is dup
    assert tree.orphans == [orphan]
    text = "\n".join(tree.problems)
    assert "f.jsonl:3: span id" in text and "appears twice" in text
    assert "f.jsonl:4: trace t1: 1 span(s) name a parent that is not in the input" in text
    assert "hand:out: span 'out'" in text and "ends late by 0.000 ms" in text
