"""A task's sub-agents' runs and its agent's compactions as SQL over the tree's tables (tree.py):
the stages they split a task's path into (report/stages.py's stage_times), what compactions cost the
cache (stages.compaction_costs) and the sub-agent count (figures._scan_step). Stated once, read by
the summary's task values (summary_sql.py) and by the rows' per-task figures (`task_runs`).

What they do not state goes to the per-span code (coverage.per_span_tasks): a compaction below
the task's agent rather than right under it, and a sub-agent's run and a compaction one inside
the other (their stages nest).
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.columnar.rows import ZEROS, charges, running_sum, sums
from agenttrace.columnar.tree import narrow
from agenttrace.report.model import SEGMENT_FIELDS, STAGE_FIELDS
from agenttrace.report.stages import STAGE_OF_SEGMENT

# Each stage's segments (1-based positions in SEGMENT_FIELDS: stage_times of a task's own time).
_STAGE_SEGMENTS = {f: [i + 1 for i, s in enumerate(SEGMENT_FIELDS) if STAGE_OF_SEGMENT.get(s, "other") == f]
                   for f in STAGE_FIELDS}
_MEMORY = SEGMENT_FIELDS.index("memory") + 1
_DLG, _CMP = sc.Segment.DELEGATION.value, sc.Segment.COMPACTION.value


def sub_runs(p: str = "x_") -> str:
    """(task, sub_ns): a delegating task's sub-agents' runs on its path, their time by segment."""
    return f"""SELECT task, {sums('off_d = 0')} AS sub_ns FROM {charges(p)} WHERE dlg GROUP BY task
HAVING countIf(seg = '{_DLG}' AND off_d = 0) > 0"""


def compaction_runs(p: str = "x_") -> str:
    """(task, comp_ns): a compacting task's compactions on its path, whole, by segment."""
    return f"""SELECT task, {sums('off_d = 0')} AS comp_ns FROM {charges(p)} WHERE cmp GROUP BY task
HAVING countIf(seg = '{_CMP}' AND off_d = 0) > 0"""


def sub_agents(p: str = "x_") -> str:
    """(task, n): the sub-agents' runs its steps hold (a hand-off before one aside)."""
    # the runs picked before the join, which holds its right side whole
    runs = f"(SELECT i, task FROM {p}t WHERE segment = '{_DLG}' AND step IS NOT NULL AND NOT in_gen)"
    return f"""SELECT t.task AS task, count() AS n FROM {p}s AS s JOIN {runs} AS t ON s.i = t.i
WHERE s.kind != 'PRODUCER' GROUP BY t.task"""


def compaction_costs(p: str = "x_") -> str:
    """(task, n, known, tokens, seconds): its agent's compactions (the spans of segment compaction
    right under it), the tokens they said the cache lost (`known` where one said it as an
    integer) and the seconds, each one's share of the next generation's prefill (the first step
    the agent starts after it, that step's first generation outside a sub-agent's run, that
    generation's first prefill child), added in the compactions' order."""
    step, gen, pre = sc.Segment.STEP.value, sc.Segment.GENERATION.value, sc.Segment.PREFILL.value
    n, tokens = sc.COMPACTION_REPREFILL_TOKENS, "pf.p.2"
    share = (f"ifNull(if(substring({tokens}, 1, 1) = 'i' AND toInt64(substring({tokens}, 2)) > 0, "
             f"least(toFloat64(1), c.n / toInt64(substring({tokens}, 2))), toFloat64(1)) * pf.p.1 / 1e9, toFloat64(0))")
    return f"""WITH c AS (
    SELECT t.task AS task, t.i AS i, s.start_ns AS start_ns, s.end_ns AS end_ns,
           substring(s.attrs['{n}'], 1, 1) = 'i' AS known, if(known, toInt64(substring(s.attrs['{n}'], 2)), 0) AS n
    FROM {p}t AS t JOIN {narrow((n,), (_CMP,))} AS s ON s.i = t.i WHERE t.segment = '{_CMP}' AND t.pi = t.task
  ), nx AS (
    SELECT c.i AS c, argMin(st.i, (st.start_ns, st.i)) AS step
    FROM c JOIN (SELECT i, pi, start_ns FROM {p}s WHERE segment = '{step}') AS st ON st.pi = c.task
    WHERE st.start_ns >= c.end_ns AND c.known AND c.n > 0 GROUP BY c.i
  ), g AS (
    SELECT nx.c AS c, argMin(t.i, (t.start_ns, t.i)) AS g
    FROM nx JOIN (SELECT i, step, start_ns FROM {p}t WHERE segment = '{gen}' AND NOT in_gen AND NOT dlg) AS t
      ON t.step = nx.step GROUP BY nx.c
  ), pf AS (
    SELECT g.c AS c, argMin((greatest(0, s.end_ns - s.start_ns), s.attrs['{sc.TOKENS}']), (s.start_ns, s.i)) AS p
    FROM g JOIN (SELECT i, pi FROM {p}s WHERE segment = '{pre}') AS k ON k.pi = g.g
    JOIN {narrow((sc.TOKENS,), (pre,))} AS s ON s.i = k.i GROUP BY g.c
  )
  SELECT c.task AS task, count() AS n, max(c.known) AS known, sumIf(c.n, c.known) AS tokens,
         {running_sum(f"arrayMap(x -> x.2, arraySort(x -> x.1, groupArray(((c.start_ns, c.i), {share}))))")} AS seconds
  FROM c LEFT JOIN pf ON pf.c = c.i GROUP BY c.task"""


def stage_ns(on: str, sub: str, comp: str) -> str:
    """SQL: the stages' nanoseconds (STAGE_FIELDS order, comma-separated) of a task whose path
    holds `on` by segment, its sub-agents' runs `sub` and its compactions `comp` ([] when none):
    a compaction's time whole as compaction (its summary's generation too), the rest by the stage
    of each segment; in a task that delegates, the sub-agents' time by theirs, the coordinator's
    own as delegation overhead (memory aside)."""
    base = f"if(empty({comp}), {on}, arrayMap((x, y) -> x - y, {on}, {comp}))"
    own = f"arrayMap((x, y) -> x - y, {base}, {sub})"

    def stage(f: str, arr: str) -> str:
        idx = _STAGE_SEGMENTS[f]
        return "(" + " + ".join(f"{arr}[{i}]" for i in idx) + ")" if idx else "toInt64(0)"

    def staged(f: str) -> str:
        if f == "memory":
            return stage(f, base)
        if f == "delegation_overhead":
            return f"if(empty({sub}), {stage(f, base)}, arraySum({own}) - {own}[{_MEMORY}])"
        by = f"if(empty({sub}), {stage(f, base)}, {stage(f, sub)})"
        return f"arraySum({comp}) + {by}" if f == "compaction" else by

    return ", ".join(staged(f) for f in STAGE_FIELDS)


def held(p: str = "x_") -> str:
    """SQL: how many spans of sub-agents' runs and compactions the tasks hold (none: no `task_runs`)."""
    return f"SELECT count() FROM {p}t WHERE segment IN ('{_DLG}', '{_CMP}')"


def task_runs(p: str = "x_") -> str:
    """Per task holding a sub-agent's run or a compaction: its stages in seconds (STAGE_FIELDS
    order), sub-agents, compactions, and the reprefill tokens and seconds (NULL: none said)."""
    on = f"if(empty(b.on_ns), {ZEROS}, b.on_ns)"
    return f"""WITH k AS (SELECT DISTINCT task FROM {p}t WHERE segment IN ('{_DLG}', '{_CMP}')
), b AS (SELECT task, {sums('off_d = 0')} AS on_ns FROM {charges(p)} WHERE task IN (SELECT task FROM k) GROUP BY task
), dl AS ({sub_runs(p)}), cp AS ({compaction_runs(p)}), sa AS ({sub_agents(p)}), cc AS ({compaction_costs(p)})
SELECT k.task AS task, arrayMap(x -> x / 1e9, [{stage_ns(on, 'dl.sub_ns', 'cp.comp_ns')}]) AS stages,
       ifNull(sa.n, 0) AS sub_agents, ifNull(cc.n, 0) AS compactions,
       if(cc.known, cc.tokens, NULL) AS reprefill_tokens, if(cc.known, cc.seconds, NULL) AS reprefill_s
FROM k LEFT JOIN b ON b.task = k.task LEFT JOIN dl ON dl.task = k.task LEFT JOIN cp ON cp.task = k.task
LEFT JOIN sa ON sa.task = k.task LEFT JOIN cc ON cc.task = k.task
SETTINGS join_use_nulls = 1"""
