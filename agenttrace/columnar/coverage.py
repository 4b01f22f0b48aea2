"""What the columnar queries do not state, asked of the tables before any figure is read.

`checks`, `tree_checks`: an input with any of these is reported by the per-span path
(`report/build.py`), whole (a trace with what `trace_checks` finds: that trace alone, where the
report routes traces, per_trace.py);
`agenttrace report --engine columnar` says which reason applied. Each entry: (reason, SQL giving
a count; non-zero means the input needs the per-span path).

`per_span_tasks`: the tasks whose figures the per-span code makes, one task at a time, from the
task's spans read back out of the table (engine.py); every other task's come from the queries.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.columnar import roles

# A span of a trace the per-span code reads (per_trace.py): its spans of another
# instrumentation need SPANS.md's structure rules, or what the SQL does not state (roles.py).
FOREIGN = roles.ROUTED


def checks() -> list[tuple[str, str]]:
    """What sends a whole input to the per-span path, asked of the span table before the tree is
    built: `input_checks`, then `trace_checks` (where no trace was routed: a tree made again)."""
    return [*input_checks(), *trace_checks()]


def input_checks() -> list[tuple[str, str]]:
    """What sends a whole input to the per-span path whatever its traces (spans sharing an id
    would multiply the parent join)."""
    return [
        ("values the per-span reader words problems about (a type, a time, an id, a nesting)",
         "SELECT count() FROM spans WHERE odd"),
        ("spans share a trace and span id", "SELECT count() - uniqExact(h) FROM spans"),
    ]


def trace_checks() -> list[tuple[str, str]]:
    """What the queries do not state of a trace (the foreign structure rules; a span of no known
    convention, or one whose role the table maps itself, they do state: roles.py):
    such a trace is reported by the per-span code, one trace at a time (per_trace.py); the whole
    input goes to the per-span path where every trace has it."""
    return [("spans the per-span code's structure rules read (another instrumentation's agents, model calls or tool "
             "executions; a model server's span under the call's)", f"SELECT count() FROM spans WHERE {FOREIGN}")]


def tree_checks(p: str = "x_") -> list[tuple[str, str]]:
    """What sends a whole input to the per-span path, asked of the tree's tables (tree.py)."""
    step = sc.Segment.STEP.value
    return [
        ("step spans without their agent span (partial tasks)",
         f"SELECT count() FROM {p}s WHERE segment = '{step}' AND i NOT IN (SELECT i FROM {p}t)"),
        # the per-span path words a problem line for each, naming the span and its source line (a
        # span wholly outside its parent's clipped interval is under one running outside its own)
        ("spans naming a parent that is not in the input",
         f"SELECT count() FROM {p}s AS x JOIN spans AS s ON s.i = x.i WHERE x.pi IS NULL AND s.ph != cityHash64(s.trace_id, '')"),
        ("spans that are each other's ancestors (a parent cycle)",
         (f"WITH RECURSIVE r AS (SELECT i FROM {p}s WHERE pi IS NULL UNION ALL "
          f"SELECT c.i FROM {p}s AS c JOIN r ON c.pi = r.i) SELECT (SELECT count() FROM {p}s) - (SELECT count() FROM r)")),
        ("steps outside their agent span",
         (f"SELECT count() FROM {p}t AS t JOIN spans AS a ON a.i = t.task JOIN spans AS s ON s.i = t.i "
          "WHERE t.step = t.i AND (s.start_ns < a.start_ns OR s.end_ns > a.end_ns)")),
        ("spans running outside their parent",
         (f"SELECT count() FROM {p}s AS c JOIN {p}s AS par ON par.i = c.pi WHERE NOT "
          "(par.kind = 'PRODUCER' AND c.kind = 'CONSUMER') AND (c.start_ns < par.start_ns OR c.end_ns > par.end_ns)")),
    ]


def per_span_tasks(p: str = "x_") -> str:
    """SQL: the tasks whose figures the per-span code makes (task_figures on the task's spans, read
    back from the table): those with what the queries do not state, for a summary's aggregates
    and the rows alike. Each is rare in a trace and costs Python per span of that task only."""
    att, gen, agent = sc.Segment.ATTEMPT.value, sc.Segment.GENERATION.value, sc.Segment.AGENT.value
    dlg, cmp = sc.Segment.DELEGATION.value, sc.Segment.COMPACTION.value
    rules = [
        # runs_sql states a sub-agent's run and a compaction right under the task's agent: not a
        # compaction further down, nor the two one inside the other (their stages nest)
        (f"SELECT task FROM {p}t WHERE (segment = '{cmp}' AND (dlg OR ifNull(pi, 0) != task)) "
         f"OR (segment = '{dlg}' AND cmp)"),
        f"SELECT task FROM {p}t WHERE segment = '{agent}' AND i != task",  # an agent inside another's
        # a model server's span in the call's (report/spec.server_side: the call's figures are its);
        # another generation inside a call (the client library's span under ours) no figure reads
        (f"SELECT task FROM {p}t WHERE segment = '{gen}' AND in_gen AND i IN (SELECT i FROM spans WHERE kind = 'SERVER')"),
        # an attempt not directly under its step, but for one of a sub-agent's run inside the
        # step's attempt (rows.attempt_rows says its validity), outside any generation
        (f"SELECT task FROM {p}t WHERE segment = '{att}' AND step IS NOT NULL AND ifNull(att, 0) != i "
         "AND NOT (dlg AND ad = 2 AND att IS NOT NULL AND NOT in_gen)"),
    ]
    return "SELECT DISTINCT task FROM (" + " UNION ALL ".join(rules) + ")"
