"""What comes back from the engine: per-task, per-step, per-attempt and per-generation rows (never
spans), as queries over the tables `tree.py` made. The rules are `report/figures.py`'s:
- a step's decision moments are its spans' (not inside a generation): a validation that held, the
  parse of a final answer, a generation with an inferred decision; a final-answer step with none
  made its decision at the end of its last successful parse;
- an attempt is valid when its parse and validation (the last of each) held; one with neither
  when its outcome is ok;
- segment times come back by owner: nanoseconds by segment on the owner's path and beside it.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.columnar import generations_sql as gs
from agenttrace.columnar.tree import dfs_key, integer, is_true, listed, narrow, text
from agenttrace.report.model import SEGMENT_FIELDS

_N = len(SEGMENT_FIELDS)
ZEROS = f"arrayWithConstant({_N}, toInt64(0))"  # nanoseconds by segment where an owner has none
# A span's own nanoseconds (tree.py's `{p}c`) as an array in SEGMENT_FIELDS' order: its segment's
# time, and a generation's draft, verify and constrain parts at theirs.
_PARTS = {"draft": " + draft_ns", "verify": " + verify_ns", "constrain": " + constrain_ns"}
_BY_SEGMENT = "[" + ", ".join(f"if(seg = '{s}', seg_ns, 0){_PARTS.get(s, '')}" for s in SEGMENT_FIELDS) + "]"


def running_sum(ordered: str) -> str:
    """The values added one after another (arrayCumSum is a running sum: its last is Python's sum
    in that order, bit for bit)."""
    return f"arrayCumSum({ordered})[-1]"


def sums(condition: str, v: str = "v") -> str:
    """The arrays of the rows where `condition` holds, summed element-wise (zeros when none)."""
    return f"arrayResize(sumForEachIf({v}, {condition}), {_N}, toInt64(0))"


def charges(p: str = "x_") -> str:
    """Each span's charge (tree.py's `{p}c`) with its nanoseconds as an array (`v`) and whether it
    has any (`nz`)."""
    return (f"(SELECT task, step, step_d, att, att_d, off_d, dlg, cmp, seg, {_BY_SEGMENT} AS v, "
            f"seg_ns != 0 OR draft_ns != 0 OR verify_ns != 0 OR constrain_ns != 0 AS nz FROM {p}c)")


def segment_times(p: str = "x_") -> str:
    """(kind, owner, on_ns, off_ns, task): kind 0 the task, 1 a step, 2 the retry cost of a step
    (its attempts whose outcome is not ok, their own segment times); on_ns the nanoseconds on the
    owner's path, off_ns those beside it, each an array in SEGMENT_FIELDS' order; the owner's task.
    An owner gets a row when a span of it has time (`nz`). Summed as arrays, a row per span: a row
    per span and segment grouped twice took twice as long (0.47 against 0.25 s at 1M spans)."""
    spans = charges(p)
    ok = sc.AttemptOutcome.OK.value
    return f"""SELECT 0 AS kind, task AS owner, {sums('off_d = 0')} AS on_ns, {sums('NOT (off_d = 0)')} AS off_ns, task
FROM {spans} GROUP BY task HAVING countIf(nz) > 0
UNION ALL
SELECT 1, assumeNotNull(step), {sums('off_d <= step_d')}, {sums('NOT (off_d <= step_d)')}, any(task)
FROM {spans} WHERE step IS NOT NULL GROUP BY step HAVING countIf(nz) > 0
UNION ALL
SELECT 2, assumeNotNull(c.step), {sums('c.nz', 'c.v')}, {ZEROS}, any(c.task)
FROM {spans} AS c
WHERE c.att IS NOT NULL AND c.off_d <= c.att_d AND c.att IN (
  SELECT i FROM spans WHERE segment = '{sc.Segment.ATTEMPT}'
    AND if(attrs['{sc.ATTEMPT_OUTCOME}'] = '', '{ok}', {text(sc.ATTEMPT_OUTCOME)}) != '{ok}')
GROUP BY c.step HAVING countIf(c.nz) > 0
SETTINGS join_use_nulls = 0"""


# The segments of the spans step_rows reads below a step.
_STEP_SCAN_SEGMENTS = (sc.Segment.VALIDATION, sc.Segment.PARSE, sc.Segment.GENERATION, sc.Segment.ATTEMPT,
                       sc.Segment.STEP)  # each step's own span keeps its row in `per`


def _decision_end() -> str:
    """SQL over a span of `spans` (bare columns): the end of its decision moment, if it is one."""
    return (f"multiIf((segment = '{sc.Segment.VALIDATION}' AND {is_true(sc.VALIDATION_OK)}) "
            f"OR (segment = '{sc.Segment.PARSE}' AND {text(sc.PARSE_RESULT)} = 'final_answer') "
            f"OR (segment = '{sc.Segment.GENERATION}' AND mapContains(attrs, '{sc.INFERRED_DECISION}')), end_ns, NULL)")


# What these queries read of a span is computed over `spans` before the join to the tree, with the
# tree's rows (a few narrow columns) on the join's right. Joining the tree to the spans' attribute
# maps held the maps in the join and carried them through it: at 1M spans the attempts' join alone
# took 0.04 s, with the maps carried to one comparison 0.4 s; the step values took 1.1-1.25 s
# that way, 0.57-0.68 s this way (measured: scripts/columnar_ab.py).
def step_rows(p: str = "x_") -> str:
    """A row per task step: its figures' inputs, by task and start."""
    return f"""WITH scan AS (
  SELECT t.step AS step, s.moment AS moment, s.correct AS correct, s.marks AS marks, s.parse_ok_end AS parse_ok_end,
         t.att = t.i AS is_att
  FROM (SELECT i, {_decision_end()} AS moment, if(moment IS NOT NULL AND {is_true(sc.DECISION_CORRECT)}, moment, NULL) AS correct,
               moment IS NOT NULL AND mapContains(attrs, '{sc.DECISION_CORRECT}') AS marks,
               if(segment = '{sc.Segment.PARSE}' AND {is_true(sc.PARSE_OK)}, end_ns, NULL) AS parse_ok_end
        FROM spans WHERE segment IN ({listed(_STEP_SCAN_SEGMENTS)})) AS s
  JOIN (SELECT i, step, att FROM {p}t WHERE step IS NOT NULL AND NOT in_gen AND segment IN ({listed(_STEP_SCAN_SEGMENTS)})) AS t
    ON t.i = s.i
), per AS (
  SELECT step, countIf(moment IS NOT NULL) AS moments, min(moment) AS first, min(correct) AS first_correct, max(marks) AS marks, max(parse_ok_end) AS last_parse_ok,
         countIf(is_att) AS attempt_kids
  FROM scan GROUP BY step
)
SELECT t.task AS task, s.i AS step, s.start_ns AS start_ns, s.end_ns AS end_ns, s.idx AS idx, s.outcome AS outcome,
       if(s.attempts != 0, s.attempts, per.attempt_kids) AS attempts,
       if(per.first IS NULL AND s.final, per.last_parse_ok, per.first) AS first,
       if(per.moments = 0 AND first IS NOT NULL, 1, per.moments) AS moments,
       per.first_correct AS first_correct, per.marks AS marks, s.inferred AS inferred
FROM (SELECT i, start_ns, end_ns, {integer(sc.STEP_INDEX)} AS idx,
             if(attrs['{sc.STEP_OUTCOME}'] = '', 'unknown', {text(sc.STEP_OUTCOME)}) AS outcome,
             {integer(sc.STEP_ATTEMPTS)} AS attempts, {text(sc.STEP_OUTCOME)} = '{sc.StepOutcome.FINAL_ANSWER}' AS final,
             mapContains(attrs, '{sc.INFERRED}') AS inferred
      FROM spans WHERE segment = '{sc.Segment.STEP}') AS s
JOIN (SELECT i, task FROM {p}t WHERE step = i) AS t ON t.i = s.i JOIN per ON per.step = t.i
ORDER BY t.task, s.start_ns, s.i
SETTINGS join_use_nulls = 1"""


def attempt_rows(p: str = "x_") -> str:
    """A row per attempt under a task step: (task, valid). A step's own attempt holds every
    parse and validation below it, a sub-agent's too (figures._attempt_valid walks the whole
    subtree); an attempt of a sub-agent's run inside it (`ad` 2) holds its own. The last of each
    is the last in the per-span walk's order (tree.dfs_key)."""
    ok = sc.AttemptOutcome.OK.value
    parse, validation = sc.Segment.PARSE.value, sc.Segment.VALIDATION.value
    return f"""WITH scan AS (
  SELECT arrayJoin(if(t.ad = 2, [assumeNotNull(t.att), assumeNotNull(t.ia)], [assumeNotNull(t.att)])) AS a,
         s.segment AS seg, {dfs_key()} AS at, s.held AS held
  FROM (SELECT i, segment, start_ns, if(segment = '{parse}', {is_true(sc.PARSE_OK)}, {is_true(sc.VALIDATION_OK)}) AS held
        FROM spans WHERE segment IN ('{parse}', '{validation}')) AS s
  JOIN (SELECT i, att, ia, ad FROM {p}t WHERE att IS NOT NULL AND NOT in_gen AND segment IN ('{parse}', '{validation}')) AS t
    ON t.i = s.i
  LEFT JOIN {p}dk AS dk ON dk.i = t.i
), per AS (  -- each span in its step's attempt, and in a sub-agent's attempt inside that one
  SELECT a, countIf(seg = '{parse}') AS parses, argMaxIf(held, at, seg = '{parse}') AS parse_ok,
         countIf(seg = '{validation}') AS validations, argMaxIf(held, at, seg = '{validation}') AS validation_ok
  FROM scan GROUP BY a
)
SELECT t.task AS task,
       if(ifNull(per.parses, 0) = 0 AND ifNull(per.validations, 0) = 0, s.ok,
          (ifNull(per.parses, 0) = 0 OR per.parse_ok) AND (ifNull(per.validations, 0) = 0 OR per.validation_ok)) AS valid
FROM (SELECT i, {text(sc.ATTEMPT_OUTCOME)} = '{ok}' AS ok FROM spans WHERE segment = '{sc.Segment.ATTEMPT}') AS s
JOIN (SELECT i, task FROM {p}t WHERE step IS NOT NULL AND segment = '{sc.Segment.ATTEMPT}') AS t ON t.i = s.i
LEFT JOIN per ON per.a = t.i
SETTINGS join_use_nulls = 1"""


def task_rows(p: str = "x_") -> str:
    """A row per task (agent span), in start order (ties: input order)."""
    return f"""SELECT s.i AS task, s.trace_id AS trace_id,
       if(mapContains(s.attrs, '{sc.TASK_ID}'), {text(sc.TASK_ID, 's.attrs')}, s.span_id) AS task_id,
       if(mapContains(s.attrs, '{sc.GEN_AI_AGENT_NAME}'), {text(sc.GEN_AI_AGENT_NAME, 's.attrs')}, s.name) AS agent,
       s.run_label AS run_label, s.run_id AS run_id,
       if(mapContains(s.attrs, '{sc.TASK_OUTCOME}'), {text(sc.TASK_OUTCOME, 's.attrs')}, 'unknown') AS outcome,
       s.start_ns AS start_ns, s.end_ns AS end_ns, {integer(sc.DECISIONS_INVALID, 's.attrs')} AS decisions_invalid
FROM spans AS s WHERE s.i IN (SELECT DISTINCT task FROM {p}t)
ORDER BY s.start_ns, s.i"""


# The values the records do not read (the summary's, or those others are made of): not sent back.
_UNREAD = ("knows_prefill", "method", "constrained", "constrain_fallback", "rf_ok", "rf_odd")


def generation_rows(p: str = "x_") -> str:
    """A row per generation a step made (not one inside another generation): its values
    (generations_sql.values), the attributes read as text (generations_sql.TEXT_KEYS; every one
    spec.py reads where the values do not state the generation: `whole`), the step's index and
    its innermost attempt's (a sub-agent's own inside the step's, as figures._scan_step meets
    them); `walk` orders a step's rows as the per-span walk meets them, the order its generations
    tell the what-if (tree.dfs_key: records.py sorts by task, step, walk)."""
    texts = ", ".join(f"'{k}'" for k in gs.TEXT_KEYS)
    return f"""WITH prefills AS ({gs.prefills(p)}
), g AS (
  SELECT t.task AS task, t.step AS step, {integer(sc.ATTEMPT_INDEX, 'a.attrs')} AS attempt, s.start_ns AS start_ns,
         s.end_ns AS end_ns, s.attrs AS all_attrs, {dfs_key()} AS walk, ifNull(prefills.ns, 0) AS prefill_ns,
         ifNull(prefills.any, false) AS has_prefills, {gs.values()}
  FROM {p}t AS t JOIN {gs.generations(p)} AS s ON s.i = t.i
  LEFT JOIN {narrow((sc.ATTEMPT_INDEX,), (sc.Segment.ATTEMPT,), 'segment')} AS a ON a.i = t.ia
  LEFT JOIN prefills ON prefills.pi = t.i LEFT JOIN {p}dk AS dk ON dk.i = t.i
  WHERE t.step IS NOT NULL AND NOT t.in_gen AND s.segment = '{sc.Segment.GENERATION}'
)
SELECT * EXCEPT (all_attrs, {", ".join(gs.STEPS)}, {", ".join(_UNREAD)}), mapFilter((k, v) -> whole OR k IN ({texts}), all_attrs) AS attrs
FROM g
SETTINGS join_use_nulls = 0"""


def path_spans(p: str = "x_") -> str:
    """The spans of the tasks where something ran in parallel (their figures list the critical
    path's sections, which Jaeger's walk gives: span_tree.critical_path runs on these, per task)."""
    return f"""SELECT t.task AS task, t.i AS i, t.pi AS pi, s.trace_id AS trace_id, s.name AS name, s.kind AS kind,
       s.start_ns AS start_ns, s.end_ns AS end_ns, s.segment AS segment
FROM {p}t AS t JOIN spans AS s ON s.i = t.i
WHERE t.task IN (SELECT DISTINCT task FROM {p}c WHERE off_d > 0 AND (seg_ns + draft_ns + verify_ns + constrain_ns) != 0)
ORDER BY t.task, t.i"""


def task_spans(tasks_sql: str, p: str = "x_") -> str:
    """Every span of the tasks `tasks_sql` picks, as the per-span code reads them: real ids (the
    parent's through `pi`), attributes and rounds, in input order."""
    # the tasks' spans picked before the joins, which hold their right sides whole (every span's
    # columns were 0.5 s at 1M spans where no task was picked)
    return f"""WITH picked AS (SELECT i, pi, task FROM {p}t WHERE task IN ({tasks_sql}))
SELECT t.task AS task, t.i AS i, s.trace_id AS trace_id, s.span_id AS span_id,
       par.span_id AS parent_id, s.name AS name, s.kind AS kind, s.status AS status, s.start_ns AS start_ns,
       s.end_ns AS end_ns, s.attrs AS attrs, s.rounds AS rounds, s.run_label AS run_label, s.run_id AS run_id
FROM picked AS t JOIN (SELECT * FROM spans WHERE i IN (SELECT i FROM picked)) AS s ON s.i = t.i
LEFT JOIN (SELECT i, span_id FROM spans WHERE i IN (SELECT pi FROM picked)) AS par ON par.i = t.pi
ORDER BY t.task, t.i
SETTINGS join_use_nulls = 1"""
