"""The span tree and the segment attribution as SQL over `spans` (load.py): the rules of
`report/span_tree.py` and `report/segments.py`, stated once more for a columnar engine, and
checked against them value for value (tests/columnar).

One statement per list item; each makes a temporary Memory table named `{p}...` (the session's own:
nothing lands in a store's database):
- `{p}s`: each span with its parent's order key (`pi`; NULL for a root or a missing parent);
- `{p}t`: one top-down pass from the roots carrying the task (the outermost agent span), the step
  (the task's step the span is under: not through a sub-agent's run), the attempt (a child attempt
  of that step), the interval sanitised against the parent's (children wholly outside it are
  `dropped`), the inherited segment (a span of no segment inside a generation is generation),
  whether it sits inside a generation, whether it is or sits inside a sub-agent's run (`dlg`) or a
  compaction (`cmp`), and the innermost attempt it is or sits in (`ia`, a sub-agent's own inside the
  step's) with the number of attempts down to it (`ad`);
- `{p}f`: `followed`: where a parent's blocking children overlap, only the chain of the critical
  path is followed (the latest end, then the latest end at or before that child's start);
- `{p}o`: `off_d`, the depth (from the task) of the deepest link off the path above each span: a
  span's time is in an ancestor's segment times when `off_d` <= the ancestor's depth, else in its
  overlap;
- `{p}c`: each span's charge: its self time by segment, with draft, verify and constrain carved out
  of a generation's self time (round half to even, as Python's round);
- `{p}dk`: in a step where some span's blocking children overlap (sub-agents' runs side by side),
  each generation, parse and validation's key in the per-span walk's order (depth first, children
  by start then input order: figures._scan_step): its ancestors' (start, order) below the step.
  Elsewhere that order is time order, (start, order) itself (`dfs_key`).
All arithmetic is Int64 nanoseconds.
"""

from __future__ import annotations

import re

from agenttrace import semconv as sc
from agenttrace.report.model import SEGMENT_FIELDS

_M = "ENGINE = Memory"
_SEGS = ", ".join(f"'{s}'" for s in SEGMENT_FIELDS if s != "other")


def num(key: str, m: str = "attrs") -> str:
    """An attribute as a number where it is one (integer, double or boolean, as Python's
    isinstance(v, (int, float))), else 0."""
    return f"if(substring({m}['{key}'], 1, 1) IN ('i', 'd', 'b'), toFloat64OrZero(substring({m}['{key}'], 2)), 0)"


def integer(key: str, m: str = "attrs") -> str:
    """An attribute as int(float(x)) of `num`'s number (truncated toward zero), as spec.py reads
    counts."""
    return f"toInt64({num(key, m)})"


def text(key: str, m: str = "attrs") -> str:
    """An attribute's text ('' when absent)."""
    return f"substring({m}['{key}'], 2)"


def is_true(key: str, m: str = "attrs") -> str:
    return f"({m}['{key}'] = 'b1')"


# The attributes that carve a generation's self time (draft, verify, constrain): only spans
# holding one join the charge's query (the rest carve nothing).
_CARVED = (sc.SPEC_DRAFT_S, sc.SPEC_VERIFY_S, sc.CONSTRAIN_MASK_S, sc.CONSTRAIN_COMPILE_S)


def listed(values) -> str:
    """SQL: the texts `values` as the list of an IN (...)."""
    return ", ".join(f"'{v}'" for v in values)


def narrow(keys: tuple[str, ...] | None = None, segments: tuple[str, ...] = (), cols: str = "segment, start_ns, end_ns") -> str:
    """`spans` as the right side of a join: `cols`, the attributes `keys` (None: all), the spans of
    `segments` (empty: all). A join holds its right side in memory whole: joining the table itself
    held every span's attributes (0.6 GB at 1M spans, measured) where a query read four keys."""
    attrs = "attrs" if keys is None else f"mapFilter((k, v) -> k IN ({listed(keys)}), attrs)"
    where = f" WHERE segment IN ({listed(segments)})" if segments else ""
    return f"(SELECT i, {cols}, {attrs} AS attrs FROM spans{where})"


def dfs_key(dk: str = "dk", s: str = "s") -> str:
    """SQL: a span's key in the per-span walk's order within its step (`{p}dk` left-joined as
    `dk`, or its own (start, order) where that table has none)."""
    return f"if(empty({dk}.key), [({s}.start_ns, {s}.i)], {dk}.key)"


_CREATED = re.compile(r"CREATE TEMPORARY TABLE (\w+)")


def created(sqls: list[str]) -> list[str]:
    """The tables the statements `sqls` make, in order."""
    return [name for sql in sqls for name in _CREATED.findall(sql)]


def statements(p: str = "x_") -> list[str]:
    gen, step, att, agent = (sc.Segment.GENERATION.value, sc.Segment.STEP.value, sc.Segment.ATTEMPT.value,
                             sc.Segment.AGENT.value)
    dlg, cmp = sc.Segment.DELEGATION.value, sc.Segment.COMPACTION.value
    closed = f"('{dlg}')"
    # below a sub-agent's run (or an agent inside the task's): not the task's steps (figures.task_steps)
    shut = f"(r.closed OR (r.task IS NOT NULL AND (r.seg IN {closed} OR (r.seg = '{agent}' AND r.i != r.task))))"
    detached = "(c.pkind = 'PRODUCER' AND c.kind = 'CONSUMER')"
    made = [
        f"""CREATE TEMPORARY TABLE {p}s {_M} AS
SELECT c.i AS i, c.start_ns AS start_ns, c.end_ns AS end_ns, c.kind AS kind, c.segment AS segment,
       if(par.i = c.i, NULL, par.i) AS pi, par.kind AS pkind
FROM spans AS c LEFT JOIN spans AS par ON par.h = c.ph
SETTINGS join_use_nulls = 1""",
        f"""CREATE TEMPORARY TABLE {p}t {_M} AS
WITH RECURSIVE r AS (
  SELECT i, if(segment = '{agent}', i, NULL) AS task, start_ns AS lo, greatest(start_ns, end_ns) AS hi,
         segment AS seg, CAST(NULL AS Nullable(String)) AS inh, true AS blk, false AS dropped, toUInt32(0) AS depth,
         CAST(NULL AS Nullable(UInt64)) AS step, toUInt32(0) AS step_d, CAST(NULL AS Nullable(UInt64)) AS att,
         toUInt32(0) AS att_d, false AS in_gen, false AS closed, pi, start_ns, false AS in_dlg, false AS in_cmp,
         CAST(NULL AS Nullable(UInt64)) AS ia, toUInt32(0) AS ad
  FROM {p}s WHERE pi IS NULL
  UNION ALL
  SELECT c.i,
         coalesce(r.task, if(c.segment = '{agent}', c.i, NULL)),
         if(r.task IS NULL OR {detached}, c.start_ns, greatest(c.start_ns, r.lo)),
         if(r.task IS NULL OR {detached}, greatest(c.start_ns, c.end_ns), least(c.end_ns, r.hi)),
         c.segment,
         multiIf(r.seg = '', r.inh, r.seg = '{gen}', '{gen}', NULL),
         r.task IS NULL OR NOT {detached},
         r.dropped OR (r.task IS NOT NULL AND NOT {detached}
                       AND ((c.start_ns >= r.lo AND c.start_ns >= r.hi) OR (c.start_ns < r.lo AND c.end_ns <= r.lo))),
         if(r.task IS NULL, toUInt32(0), r.depth + 1),
         if(r.step IS NULL AND r.task IS NOT NULL AND NOT {shut} AND c.segment = '{step}', c.i, r.step),
         if(r.step IS NULL AND r.task IS NOT NULL AND NOT {shut} AND c.segment = '{step}', r.depth + 1, r.step_d),
         if(r.att IS NULL AND r.step = r.i AND c.segment = '{att}', c.i, r.att),
         if(r.att IS NULL AND r.step = r.i AND c.segment = '{att}', r.depth + 1, r.att_d),
         r.in_gen OR r.seg = '{gen}',
         {shut},
         c.pi, c.start_ns,
         r.in_dlg OR (r.task IS NOT NULL AND r.seg = '{dlg}'),
         r.in_cmp OR (r.task IS NOT NULL AND r.seg = '{cmp}'),
         if(c.segment = '{att}', c.i, r.ia), r.ad + if(c.segment = '{att}', 1, 0)
  FROM r JOIN {p}s AS c ON c.pi = r.i
)
SELECT r.i AS i, assumeNotNull(r.task) AS task, r.lo AS lo, r.hi AS hi, r.inh AS inh,
       r.blk AND r.i != r.task AS blk, r.dropped AS dropped, r.depth AS depth, r.step AS step, r.step_d AS step_d,
       r.att AS att, r.att_d AS att_d, r.in_gen AS in_gen, r.pi AS pi, r.start_ns AS start_ns, r.seg AS segment,
       r.in_dlg OR r.seg = '{dlg}' AS dlg, r.in_cmp OR r.seg = '{cmp}' AS cmp, r.ia AS ia, r.ad AS ad
FROM r WHERE r.task IS NOT NULL""",
        # parents whose blocking children overlap (children in start order, ties: input order)
        f"""CREATE TEMPORARY TABLE {p}ov {_M} AS
SELECT pi FROM (
  SELECT pi, lo, max(hi) OVER (PARTITION BY pi ORDER BY start_ns, i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev,
         row_number() OVER (PARTITION BY pi ORDER BY start_ns, i) AS k
  FROM {p}t WHERE blk AND NOT dropped)
GROUP BY pi HAVING max(k > 1 AND lo < prev)""",
        f"""CREATE TEMPORARY TABLE {p}kk {_M} AS
SELECT t.pi AS pi, t.i AS i, t.lo AS lo, t.hi AS hi, row_number() OVER (PARTITION BY t.pi ORDER BY t.start_ns, t.i) AS k
FROM {p}t AS t WHERE t.blk AND NOT t.dropped AND t.pi IN (SELECT pi FROM {p}ov)""",
        f"CREATE TEMPORARY TABLE {p}d {_M} AS SELECT pi, hi, argMin(i, k) AS i FROM {p}kk GROUP BY pi, hi",
        f"""CREATE TEMPORARY TABLE {p}nxt {_M} AS
SELECT c.i AS i, d.i AS ni FROM {p}kk AS c ASOF JOIN {p}d AS d ON c.pi = d.pi AND c.lo >= d.hi""",
        f"""CREATE TEMPORARY TABLE {p}chain {_M} AS
WITH RECURSIVE ch AS (
  SELECT argMax(i, hi) AS i FROM {p}d GROUP BY pi
  UNION ALL
  SELECT n.ni FROM ch JOIN {p}nxt AS n ON n.i = ch.i
)
SELECT i FROM ch""",
        f"""CREATE TEMPORARY TABLE {p}f {_M} AS
SELECT i, pi, task, depth, blk AND (pi NOT IN (SELECT pi FROM {p}ov) OR i IN (SELECT i FROM {p}chain)) AS followed,
       blk, hi - lo AS ns, segment
FROM {p}t WHERE NOT dropped""",
        f"""CREATE TEMPORARY TABLE {p}o {_M} AS
WITH RECURSIVE o AS (
  SELECT i, toUInt32(0) AS off_d FROM {p}f WHERE i = task
  UNION ALL
  SELECT f.i, if(f.followed, o.off_d, f.depth) FROM o JOIN {p}f AS f ON f.pi = o.i
)
SELECT i, off_d FROM o""",
        f"""CREATE TEMPORARY TABLE {p}c {_M} AS
WITH kids AS (  -- off {p}f, which carries what they need of {p}t
  -- (joining the two: the charge 0.55-0.91 s at 1M spans, now 0.46-0.58 s)
  SELECT pi, sum(if(followed, ns, 0)) AS kid_ns, max(segment IN ('draft', 'verify')) AS has_dv
  FROM {p}f WHERE blk GROUP BY pi
), base AS (
  SELECT t.i AS i, t.task AS task, t.step AS step, t.step_d AS step_d, t.att AS att, t.att_d AS att_d, t.dlg AS dlg, t.cmp AS cmp,
         if(t.segment != '', t.segment, coalesce(t.inh, 'other')) AS seg0,
         (t.hi - t.lo) - coalesce(kids.kid_ns, 0) AS self_ns, coalesce(kids.has_dv, false) AS has_dv,
         ifNull(s.draft_s, 0) AS draft_s, ifNull(s.verify_s, 0) AS verify_s, ifNull(s.con_s, 0) AS con_s
  FROM {p}t AS t LEFT JOIN kids ON kids.pi = t.i LEFT JOIN (
    SELECT i, {num(sc.SPEC_DRAFT_S)} AS draft_s, {num(sc.SPEC_VERIFY_S)} AS verify_s,
           {num(sc.CONSTRAIN_MASK_S)} + {num(sc.CONSTRAIN_COMPILE_S)} AS con_s FROM spans
    WHERE {" OR ".join(f"mapContains(attrs, '{k}')" for k in _CARVED)}) AS s ON s.i = t.i
  WHERE NOT t.dropped
), seg AS (
  SELECT *, if(seg0 IN ({_SEGS}), seg0, 'other') AS seg FROM base
), dv AS (
  SELECT *, if(seg = '{gen}' AND NOT has_dv, greatest(0, least(self_ns, toInt64(roundBankers(draft_s * 1e9)))), 0) AS draft_ns
  FROM seg
), dv2 AS (
  SELECT *, if(seg = '{gen}' AND NOT has_dv,
               greatest(0, least(self_ns - draft_ns, toInt64(roundBankers(verify_s * 1e9)))), 0) AS verify_ns FROM dv
), c AS (
  SELECT *, if(seg = '{gen}', greatest(0, least(self_ns - draft_ns - verify_ns, toInt64(roundBankers(con_s * 1e9)))), 0)
            AS constrain_ns FROM dv2
)
SELECT c.i AS i, task, step, step_d, att, att_d, dlg, cmp, o.off_d AS off_d, seg,
       self_ns - draft_ns - verify_ns - constrain_ns AS seg_ns, draft_ns, verify_ns, constrain_ns
FROM c JOIN {p}o AS o ON o.i = c.i
SETTINGS join_use_nulls = 1""",
    ]
    # the per-span walk's order where sub-agents' (or other) runs overlap in a step (`{p}dk`)
    made.append(f"""CREATE TEMPORARY TABLE {p}dk {_M} AS
WITH RECURSIVE up AS (
  SELECT t.i AS i, t.pi AS cur, [(t.start_ns, t.i)] AS key, assumeNotNull(t.step) AS step
  FROM {p}t AS t
  WHERE t.step IN (SELECT step FROM {p}t WHERE i IN (SELECT pi FROM {p}ov) AND step IS NOT NULL)
    AND t.i != t.step AND NOT t.in_gen AND t.segment IN ('{gen}', '{sc.Segment.PARSE}', '{sc.Segment.VALIDATION}')
  UNION ALL
  SELECT up.i, s.pi, arrayPushFront(up.key, (s.start_ns, s.i)), up.step
  FROM up JOIN {p}s AS s ON s.i = up.cur WHERE up.cur != up.step
)
SELECT i, key FROM up WHERE cur = step""")
    # speculation rounds told as draft and verify child spans (the runtime's fine detail), for a
    # generation with no round events: spec.rounds_of's, each kind in the children's order (start,
    # then input order), paired as far as both go
    draft, verify = sc.Segment.DRAFT.value, sc.Segment.VERIFY.value
    dur = "greatest(0, k.end_ns - k.start_ns) / 1e9"
    made.append(f"""CREATE TEMPORARY TABLE {p}kr {_M} AS
SELECT pi, arrayMap(n -> (d[n].2, v[n].2, d[n].3, v[n].3, toInt64(0), v[n].4), range(1, least(length(d), length(v)) + 1))
       AS rounds
FROM (
  SELECT k.pi AS pi,
         arraySort(x -> x.1, groupArrayIf(((k.start_ns, k.i), {integer(sc.SPEC_DRAFTED, 'a.attrs')}, {dur}),
                                          k.segment = '{draft}')) AS d,
         arraySort(x -> x.1, groupArrayIf(((k.start_ns, k.i), {integer(sc.SPEC_ACCEPTED, 'a.attrs')}, {dur},
                                           {integer(sc.SPEC_TREE_DEPTH, 'a.attrs')}), k.segment = '{verify}')) AS v
  FROM {p}s AS k JOIN {narrow((sc.SPEC_DRAFTED, sc.SPEC_ACCEPTED, sc.SPEC_TREE_DEPTH), (draft, verify), 'segment')} AS a
    ON a.i = k.i
  WHERE k.pi IN (SELECT i FROM spans WHERE segment = '{gen}' AND empty(rounds))
  GROUP BY k.pi
)""")
    # what only the charge is made of: dropped (their memory, 60 MB at 1M spans, is the queries')
    kept = (f"{p}s", f"{p}t", f"{p}c", f"{p}dk", f"{p}kr")
    return made + [f"DROP TEMPORARY TABLE {name}" for name in created(made) if name not in kept]
