"""The run figures as aggregates in the engine (issue 32): per task, step and generation the values
the run figures fold (`report/runs.py`'s RunFold and SpecSums read them off the report's records),
then one aggregate row per run label, per label and drafter, and for the whole run. Only those rows
come back: a summary of any number of spans is a few kilobytes.

The values are the per-task rows' (`rows.py`) and the per-span code's definitions (figures.py,
spec.py), stated as columns; the folds keep their bits:
- a sum of floats adds them one after another in the order the report's fold adds them (tasks by
  start, their steps by start, each step's generations by start: the values sorted by that key,
  then a running sum, `arrayCumSum`, whose last element is that sum), never in an engine's
  parallel order;
- a distribution comes back as its count, that sum, its extremes and the two order statistics each
  percentile lies between (`report/stats.order_statistics`); `stats.from_order_statistics` makes
  the figures, as `stats.distribution` does from the values themselves.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.columnar import generations_sql as gs
from agenttrace.columnar import rows, runs_sql
from agenttrace.columnar.generations_sql import truthy
from agenttrace.columnar.rows import ZEROS, running_sum
from agenttrace.columnar.tree import dfs_key, narrow, text
from agenttrace.report.model import SEGMENT_FIELDS, STAGE_FIELDS
from agenttrace.report.spec import GENERATION_KEYS
from agenttrace.report.stats import PERCENTILES

_M = "ENGINE = Memory"
_N = len(SEGMENT_FIELDS)
# Per task: the floats the fold sums, in this order (`task_sums` names them back).
TASK_SUMS = ("wall_s", "retry_s", "overlap_s", *(f"stage_{f}" for f in STAGE_FIELDS),
             *(f"seg_{s}" for s in SEGMENT_FIELDS), *(f"retry_{s}" for s in SEGMENT_FIELDS),
             *(f"overlap_{s}" for s in SEGMENT_FIELDS), "reprefill_s")
GEN_SUMS = ("wall_s", "draft_s", "verify_s", "prefill_s")
TASK_DISTRIBUTIONS = ("task_wall", "ttvtc", "tca", "throughput")
STEP_DISTRIBUTIONS = ("step_wall", "step_ttvtc", "retry_per_step")
GEN_DISTRIBUTIONS = ("tokens_per_s", "decode_per_token", "acceptance")


def _seconds(arr: str) -> str:
    return f"arrayMap(x -> x / 1e9, {arr})"


# What a generation adds to the what-if (report/whatif.py's Decoding and spec.AcceptanceStats, as
# columnar/assemble.py's _acceptance makes them from the round columns).
_WHATIF_VALUES = """decode_per_token IS NOT NULL AND decode_per_token != 0 AS dec, ifNull(decode_per_token, toFloat64(0)) * out AS d,
       d - draft_s - verify_s AS outside, toFloat64(greatest(0, out - 1 - rounds - accepted)) AS ux,
       toFloat64(rounds) AS uy, ux * ux AS xx, uy * uy AS yy, ux * uy AS xy, ux * outside AS xt, uy * outside AS yt,
       r_n > 0 AS has_rounds,
       toInt64(if(has_rounds, toInt64(r_accepted), accepted)) AS a_accepted,
       toInt64(if(has_rounds, toInt64(r_rejections), greatest(0, drafted - accepted))) AS a_rejections,
       toInt64(if(has_rounds AND drafted = 0, toInt64(r_drafted), drafted)) AS a_drafted,
       toInt64(if(has_rounds AND rounds = 0, toInt64(r_n), rounds)) AS a_rounds,
       toInt64(if(has_rounds, toInt64(c_no_draft), 0)) AS a_no_draft,
       if(a_no_draft = 0, c_offered, if(empty(c_offered), [toFloat64(a_no_draft)],
          arrayConcat([c_offered[1] + a_no_draft], arraySlice(c_offered, 2)))) AS a_offered,
       if(a_no_draft = 0 OR has(c_asked_k, c_common_k), c_asked_k, arrayPushBack(c_asked_k, c_common_k)) AS a_asked_k,
       arrayMap((x, i) -> if(a_no_draft != 0 AND x = c_common_k, if(i <= length(c_asked_n), c_asked_n[i], 0) + a_no_draft,
                             c_asked_n[i]), a_asked_k, arrayEnumerate(a_asked_k)) AS a_asked_n"""


# The text values the summary reads (the rows read them in Python: generations_sql.TEXT_KEYS);
# `checks` sends a generation whose text is of another type to the rows.
_TEXTS = f"""multiIf({truthy(sc.GEN_AI_REQUEST_MODEL, 's.attrs')}, {text(sc.GEN_AI_REQUEST_MODEL, 's.attrs')},
               mapContains(s.attrs, '{sc.GEN_AI_RESPONSE_MODEL}'), {text(sc.GEN_AI_RESPONSE_MODEL, 's.attrs')}, NULL) AS model,
       if(method != 'none', acceptance_rate, NULL) AS acceptance,
       if(peak_flop_s IS NULL, NULL, (assumeNotNull(peak_flop_s), assumeNotNull(peak_bytes_s),
          {text(sc.ROOFLINE_DEVICE, 's.attrs')})) AS peaks,
       if(mapContains(s.attrs, '{sc.SPEC_POLICY}'), {text(sc.SPEC_POLICY, 's.attrs')}, NULL) AS policy"""


def statements(p: str = "x_") -> list[str]:
    """The value tables, over the tree's (tree.py): `{p}tr` tasks with their order (`o`: start, then
    input order, a key that holds across batches of files), `{p}seg`
    segment nanoseconds per owner, `{p}dl` the sub-agents' runs' nanoseconds on a delegating
    task's path, `{p}cp` its compactions' on a compacting task's, `{p}sr` step values, `{p}tv` task
    values, `{p}gv` generation values."""
    gen = sc.Segment.GENERATION.value
    return [
        f"""CREATE TEMPORARY TABLE {p}tr {_M} AS
SELECT (start_ns, task) AS o, task, nullIf(run_label, '') AS label, outcome, start_ns, end_ns
FROM ({rows.task_rows(p)})""",
        f"""CREATE TEMPORARY TABLE {p}seg {_M} AS
{rows.segment_times(p)}""",
        # the sub-agents' runs and the compactions on a task's path (runs_sql.py)
        f"CREATE TEMPORARY TABLE {p}dl {_M} AS\n{runs_sql.sub_runs(p)}",
        f"CREATE TEMPORARY TABLE {p}cp {_M} AS\n{runs_sql.compaction_runs(p)}",
        # the charge is read only by the segment times above (the rows path, should a check below
        # send the input there, remakes the tree: engine.py); its memory goes to the next tables'
        f"DROP TEMPORARY TABLE {p}c",
        f"""CREATE TEMPORARY TABLE {p}sr {_M} AS
SELECT tr.o AS o, tr.label AS label, s.task AS task, s.step AS step, s.start_ns AS start_ns, s.attempts AS attempts,
       s.first AS first, s.first_correct AS first_correct, s.marks AS marks, s.moments AS moments,
       if(empty(b.on_ns), {ZEROS}, b.on_ns) AS on_ns, if(empty(r.on_ns), {ZEROS}, r.on_ns) AS retry_ns,
       greatest(0, s.end_ns - s.start_ns) / 1e9 AS wall_s, if(s.first IS NULL, NULL, (s.first - s.start_ns) / 1e9) AS ttvtc_s,
       arraySum(retry_ns) / 1e9 AS retry_s, {_seconds('on_ns')} AS seg_s, {_seconds('retry_ns')} AS retry_seg_s
FROM ({rows.step_rows(p)}) AS s JOIN {p}tr AS tr ON tr.task = s.task
LEFT JOIN (SELECT owner, on_ns FROM {p}seg WHERE kind = 1) AS b ON b.owner = s.step
LEFT JOIN (SELECT owner, on_ns FROM {p}seg WHERE kind = 2) AS r ON r.owner = s.step
SETTINGS join_use_nulls = 0""",
        f"""CREATE TEMPORARY TABLE {p}tv {_M} AS
WITH st AS (
  SELECT task, count() AS n_steps, min(first) AS first, min(first_correct) AS first_correct, max(marks) AS marks,
         sum(moments) AS valid, arraySort(x -> x.1, groupArray(((start_ns, step), retry_s, retry_seg_s))) AS ordered,
         {running_sum("arrayMap(x -> x.2, ordered)")} AS task_retry_s,
         [{", ".join(running_sum(f"arrayMap(x -> x.3[{j + 1}], ordered)") for j in range(_N))}] AS task_retry_seg
  FROM {p}sr GROUP BY task
), at AS (
  SELECT task, count() AS attempts, countIf(valid) AS valid_attempts FROM ({rows.attempt_rows(p)}) GROUP BY task
), b AS (SELECT owner, on_ns, off_ns FROM {p}seg WHERE kind = 0
), cc AS ({runs_sql.compaction_costs(p)}
), sa AS ({runs_sql.sub_agents(p)})
SELECT tr.o AS o, ifNull(sa.n, 0) AS sub_agents, tr.label AS label, tr.outcome AS outcome, (tr.end_ns - tr.start_ns) / 1e9 AS wall_s,
       ifNull(st.n_steps, 0) AS n_steps, if(st.first IS NULL, NULL, (st.first - tr.start_ns) / 1e9) AS ttvtc_s,
       if(st.first_correct IS NULL, NULL, (st.first_correct - tr.start_ns) / 1e9) AS tca_s,
       ifNull(st.marks, false) AS expects, ifNull(st.valid, 0) AS valid,
       if(wall_s > 0, valid / wall_s, toFloat64(0)) AS throughput,
       ifNull(at.attempts, 0) AS attempts, ifNull(at.valid_attempts, 0) AS valid_attempts,
       if(empty(b.on_ns), {ZEROS}, b.on_ns) AS on_ns, if(empty(b.off_ns), {ZEROS}, b.off_ns) AS off_ns,
       ifNull(cc.n, 0) AS compactions, if(cc.known, cc.tokens, NULL) AS reprefill_tokens,
       arrayConcat([wall_s, ifNull(st.task_retry_s, toFloat64(0)), arraySum(off_ns) / 1e9],
                    arrayMap(x -> x / 1e9, [{runs_sql.stage_ns('on_ns', 'dl.sub_ns', 'cp.comp_ns')}]), {_seconds('on_ns')},
                    if(empty(st.task_retry_seg), arrayWithConstant({_N}, toFloat64(0)), st.task_retry_seg),
                    {_seconds('off_ns')}, [ifNull(cc.seconds, toFloat64(0))]) AS sums
FROM {p}tr AS tr LEFT JOIN st ON st.task = tr.task LEFT JOIN at ON at.task = tr.task LEFT JOIN b ON b.owner = tr.task
LEFT JOIN {p}dl AS dl ON dl.task = tr.task LEFT JOIN {p}cp AS cp ON cp.task = tr.task LEFT JOIN sa ON sa.task = tr.task
LEFT JOIN cc ON cc.task = tr.task
SETTINGS join_use_nulls = 1""",  # (an array is never NULL: a task with no row there has [] instead: `empty`)
        # each generation's values made before the joins that place it, as rows.py does (its
        # attributes and rounds held in a join and carried through the next: 1.75-2.48 s at 1M
        # spans, now 1.19-1.46 s, measured: scripts/columnar_ab.py)
        f"""CREATE TEMPORARY TABLE {p}gv {_M} AS
SELECT * EXCEPT ({", ".join(gs.STEPS)}) FROM (
SELECT (sr.o, sr.start_ns, sr.step, s.start_ns, s.i) AS key, (sr.o, sr.start_ns, sr.step, {dfs_key()}) AS wkey,
       sr.label AS label, s.* EXCEPT (i, start_ns)
FROM (
  WITH prefills AS ({gs.prefills(p)})
  SELECT s.i AS i, s.start_ns AS start_ns, {gs.values()},
         {_TEXTS},
         {_WHATIF_VALUES}
  FROM {gs.generations(p)} AS s LEFT JOIN prefills ON prefills.pi = s.i) AS s
JOIN (SELECT i, step FROM {p}t WHERE step IS NOT NULL AND NOT in_gen AND segment = '{gen}') AS t ON t.i = s.i
JOIN (SELECT o, start_ns, step, label FROM {p}sr) AS sr ON sr.step = t.step
LEFT JOIN {p}dk AS dk ON dk.i = t.i)
SETTINGS join_use_nulls = 1""",
    ]


def checks(p: str = "x_") -> list[tuple[str, str]]:
    """What the aggregates do not state: (reason, SQL counting it); the summary is then made from
    the rows (engine.py), as a report is."""
    gen = sc.Segment.GENERATION.value
    kinds = (f"(mapContains(s.attrs, '{sc.SPEC_METHOD}') AND NOT startsWith(s.attrs['{sc.SPEC_METHOD}'], 's')) "
             f"OR startsWith(s.attrs['{sc.SPEC_FALLBACK}'], 'a')")
    kinds += "".join(f" OR (mapContains(s.attrs, '{k}') AND NOT startsWith(s.attrs['{k}'], 's'))"
                     for k in (sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL, sc.SPEC_POLICY, sc.ROOFLINE_DEVICE))
    return [("generations whose spec.method, model, policy or device is not text, or whose spec.fallback is an array",
             f"SELECT count() FROM {p}t AS t JOIN {narrow(GENERATION_KEYS, (gen,), 'segment')} AS s ON s.i = t.i WHERE ({kinds})"),
            ("generations whose roofline arrays hold values of kinds the aggregates do not read",
             f"SELECT count() FROM {p}gv WHERE rf_odd"),
            ("speculative generations with a round count but no speculate.round events (the what-if's totals path)",
             f"SELECT count() FROM {p}gv WHERE method != 'none' AND NOT has_rounds AND rounds != 0")]


def in_order(rows: str, names: tuple[str, ...]) -> str:
    """`rows` (a groupArray of (key, name...)) sorted by key once, then one array per name, in
    that order, as `{name}_o`."""
    cols = ", ".join(f"arrayMap(x -> x.{i + 2}, ordered) AS {n}_o" for i, n in enumerate(names))
    return f"arraySort(x -> x.1, {rows}) AS ordered, {cols}"


def _dist(name: str, nullable: bool = False) -> str:
    """A distribution's columns from `{name}_o`, its values in the fold's order: {name}_n,
    {name}_sum, {name}_min, {name}_max, {name}_picks (per percentile, the two order statistics it
    lies between)."""
    v, n, srt = f"{name}_o", f"{name}_n", f"{name}_sorted"
    if nullable:
        v = f"arrayMap(x -> assumeNotNull(x), arrayFilter(x -> x IS NOT NULL, {v}))"
    # written out per percentile: a lambda over the percentiles would copy the sorted values into
    # each call (ClickHouse replicates what a lambda captures)
    at = [f"(toUInt64(greatest(0, floor((toInt64({n}) - 1) * {q!r}))) + 1)" for q in PERCENTILES]
    picks = ", ".join(f"({srt}[{lo}], {srt}[least({lo} + 1, {n})])" for lo in at)
    return (f"{v} AS {name}_v, arraySort({name}_v) AS {srt}, length({name}_v) AS {n}, {running_sum(f'{name}_v')} AS {name}_sum, "
            f"{srt}[1] AS {name}_min, {srt}[-1] AS {name}_max, "
            f"[{picks}] AS {name}_picks")


def _keep(names: tuple[str, ...]) -> str:
    return ", ".join(f"{n}_n, {n}_sum, {n}_min, {n}_max, {n}_picks" for n in names)


def task_aggregates(p: str = "x_") -> str:
    """Per label (and the whole run: `whole`), the task-level figures: counts, sums in task order,
    distributions, what the traces could not give (count and the first task that lacked it)."""
    done, loop = sc.TaskOutcome.COMPLETED.value, sc.TaskOutcome.LOOP_DETECTED.value
    rows = "groupArray((o, sums, wall_s, ttvtc_s, if(expects, tca_s, NULL), throughput))"
    return f"""SELECT grouping(label) = 1 AS whole, label, min(o) AS first, count() AS tasks,
       countIf(outcome = '{done}') AS completed, countIf(outcome = '{loop}') AS loops, sum(valid) AS decisions,
       sum(sub_agents) AS sub_agents, sum(compactions) AS compactions, sum(ifNull(reprefill_tokens, 0)) AS reprefill_tokens,
       sum(attempts) AS t_attempts, sum(valid_attempts) AS t_valid_attempts,
       {in_order(rows, ("sums", "task_wall", "ttvtc", "tca", "throughput"))},
       [{", ".join(running_sum(f"arrayMap(x -> x[{j + 1}], sums_o)") for j in range(len(TASK_SUMS)))}] AS t_sums,
       countIf(n_steps = 0) AS no_steps, minIf(o, n_steps = 0) AS no_steps_first,
       countIf(ttvtc_s IS NULL) AS no_ttvtc, minIf(o, ttvtc_s IS NULL) AS no_ttvtc_first,
       countIf(outcome = 'unknown') AS no_outcome, minIf(o, outcome = 'unknown') AS no_outcome_first,
       {_dist('task_wall')}, {_dist('ttvtc', True)}, {_dist('tca', True)}, {_dist('throughput')}
FROM {p}tv GROUP BY GROUPING SETS ((label), ())"""


def step_aggregates(p: str = "x_") -> str:
    """Per label and for the whole run, the step-level figures."""
    rows = "groupArray(((o, start_ns, step), wall_s, ttvtc_s, retry_s, seg_s))"
    segs = ", ".join(f"arrayMap(x -> x[{i + 1}], seg_s_o) AS seg{i}_o, {_dist(f'seg{i}')}" for i in range(_N))
    return f"""SELECT grouping(label) = 1 AS whole, label, count() AS steps, countIf(attempts > 1) AS retried,
       {in_order(rows, ("step_wall", "step_ttvtc", "retry_per_step", "seg_s"))},
       {_dist('step_wall')}, {_dist('step_ttvtc', True)}, {_dist('retry_per_step')}, {segs}
FROM {p}sr GROUP BY GROUPING SETS ((label), ())"""


def generation_aggregates(p: str = "x_") -> str:
    """Per label, per label and drafter, per drafter and for the whole run: the generation-level
    figures and the speculation sums (spec.SpecSums)."""
    rows = f"groupArray((key, {', '.join(GEN_SUMS)}, tokens_per_s, decode_per_token, acceptance))"
    sums = ", ".join(f"{running_sum(f'{c}_o')} AS sum_{c}" for c in GEN_SUMS)
    return f"""SELECT grouping(label) = 1 AS whole, grouping(method) = 1 AS all_methods, label, method,
       count() AS n, sum(out) AS g_out, sum(rounds) AS g_rounds, sum(drafted) AS g_drafted, sum(accepted) AS g_accepted,
       countIf(fallback) AS g_fallbacks, max(k) AS g_k, arraySort(groupUniqArray(method)) AS g_methods,
       countIf(constrained) AS g_constrained, countIf(constrain_fallback) AS g_constrain_fallbacks,
       sum(drafts_cut) AS g_drafts_cut,
       {in_order(rows, (*GEN_SUMS, "tokens_per_s", "decode_per_token", "acceptance"))}, {sums},
       {_dist('tokens_per_s', True)}, {_dist('decode_per_token', True)}, {_dist('acceptance', True)}
FROM {p}gv GROUP BY GROUPING SETS ((label), (), (label, method), (method))"""


def keep_columns(query: str, names: tuple[str, ...], extra: str) -> str:
    """Only the columns a fold reads come back (not the value arrays the distributions sorted)."""
    return f"SELECT {extra}, {_keep(names)} FROM ({query})"
