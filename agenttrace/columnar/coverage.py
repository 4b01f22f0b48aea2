"""What the columnar queries do not cover yet, asked of the tables before any figure is read. An
input with any of these is reported by the per-span path (`report/build.py`), whole, so a report
never mixes two definitions; `agenttrace report --engine columnar` says which reason applied.

Each entry: (reason, SQL giving a count; non-zero means the input needs the per-span path).
"""

from __future__ import annotations

from agenttrace import semconv as sc

_FOREIGN_PREFIXES = ("gen_ai.", "llm.", "openinference.", "traceloop.", "pydantic_ai.", "gcp.vertex.agent.")


def checks(p: str = "x_") -> list[tuple[str, str]]:
    foreign = " OR ".join(f"startsWith(k, '{x}')" for x in _FOREIGN_PREFIXES)
    step, att, gen, agent = sc.Segment.STEP.value, sc.Segment.ATTEMPT.value, sc.Segment.GENERATION.value, sc.Segment.AGENT.value
    return [
        ("spans share a trace and span id", "SELECT count() - uniqExact(h) FROM spans"),
        ("spans of another instrumentation (no agenttrace.segment)",
         f"SELECT count() FROM spans WHERE segment = '' AND arrayExists(k -> {foreign}, mapKeys(attrs))"),
        # the per-span path lists such spans per input (inputs[].left_out); the queries do not yet
        ("spans with no agenttrace.segment", "SELECT count() FROM spans WHERE segment = ''"),
        ("sub-agents or compactions (stage times)",
         f"SELECT count() FROM spans WHERE segment IN ('{sc.Segment.DELEGATION}', '{sc.Segment.COMPACTION}')"),
        # the rows carry a generation's round events; rounds as draft / verify child spans are not read yet
        ("speculation rounds as draft and verify spans (no round events)",
         (f"SELECT count() FROM {p}s AS k JOIN spans AS g ON g.i = k.pi WHERE k.segment IN "
          f"('{sc.Segment.DRAFT}', '{sc.Segment.VERIFY}') AND g.segment = '{gen}' AND empty(g.rounds)")),
        ("step spans without their agent span (partial tasks)",
         f"SELECT count() FROM {p}s WHERE segment = '{step}' AND i NOT IN (SELECT i FROM {p}t)"),
        ("spans outside their parent's interval", f"SELECT count() FROM {p}t WHERE dropped"),
        ("steps outside their agent span",
         (f"SELECT count() FROM {p}t AS t JOIN spans AS a ON a.i = t.task JOIN spans AS s ON s.i = t.i "
          "WHERE t.step = t.i AND (s.start_ns < a.start_ns OR s.end_ns > a.end_ns)")),
        ("an agent span inside another's", f"SELECT count() FROM {p}t WHERE segment = '{agent}' AND i != task"),
        ("a generation inside a generation (a model server's span)",
         f"SELECT count() FROM {p}t WHERE segment = '{gen}' AND in_gen"),
        ("attempts that are not children of their step",
         f"SELECT count() FROM {p}t WHERE segment = '{att}' AND step IS NOT NULL AND ifNull(att, 0) != i"),
    ]
