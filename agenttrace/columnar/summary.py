"""A summary made in the engine (`report --sample N` on the columnar engine): the run figures of
every task, per run label and for the whole run, from the aggregate rows of `summary_sql.py`, put
into the report's own fold (`report/runs.py`'s RunFold and SpecSums, whose `figures()` make the
records) as if its tasks had been added one at a time. Nothing per task, step or span comes back,
and the figures are exact: the percentiles are the order statistics of every value, not of a
sample.
"""

from __future__ import annotations

import functools
import re

from agenttrace.columnar import coverage, tree
from agenttrace.columnar import summary_roofline as roof
from agenttrace.columnar import summary_sql as q
from agenttrace.columnar import summary_whatif as w
from agenttrace.report.model import SEGMENT_FIELDS, STAGE_FIELDS, Distribution, StageTimes
from agenttrace.report.roofline_fold import RooflineFold
from agenttrace.report.runs import RunFold
from agenttrace.report.spec import SpecSums
from agenttrace.report.stats import from_order_statistics
from agenttrace.report.whatif import WhatIfFold

_N = len(SEGMENT_FIELDS)
_MISSING = ("steps", "TTVTC", "outcome")  # figures.not_inferred's order within a task
NOTE = ("summary of {tasks} task(s), made in the engine: task rows left out; every figure over all of them "
        "(percentiles exact)")


class _Known:
    """A distribution the engine computed, where RunFold keeps a Sampler."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def distribution(self) -> Distribution:
        return self.value

    def distributions(self) -> list[Distribution]:
        return self.value


def _records(table: dict[str, list]) -> list[dict]:
    names = list(table)
    return [dict(zip(names, values, strict=True)) for values in zip(*table.values(), strict=True)]


def _key(value):
    """An order key as Python compares it (a tuple comes back from Arrow as a dict)."""
    return tuple(value.values()) if isinstance(value, dict) else value


def _dist(row: dict | None, name: str) -> Distribution:
    if row is None or not row[f"{name}_n"]:
        return Distribution(count=0)
    return from_order_statistics(row[f"{name}_n"], row[f"{name}_sum"], row[f"{name}_min"], row[f"{name}_max"],
                                 [_key(p) for p in row[f"{name}_picks"]])


def _spec_sums(row: dict) -> SpecSums:
    s = SpecSums()
    s.n, s.out, s.rounds, s.drafted, s.accepted = (row["n"], row["g_out"], row["g_rounds"], row["g_drafted"],
                                                   row["g_accepted"])
    s.fallbacks, s.k, s.methods = row["g_fallbacks"], row["g_k"], set(row["g_methods"])
    s.wall, s.draft, s.verify, s.prefill = (row[f"sum_{c}"] for c in q.GEN_SUMS)
    return s


def _fold(task: dict | None, step: dict | None, gens: dict | None, by_method: list[dict]) -> RunFold:
    """A RunFold holding what adding the label's tasks one at a time would have left in it."""
    fold = RunFold()
    if task is not None:
        sums = dict(zip(q.TASK_SUMS, task["t_sums"], strict=True))
        fold.whole, fold.completed, fold.loops = task["tasks"], task["completed"], task["loops"]
        fold.sub_agents, fold.compactions = task["sub_agents"], task["compactions"]
        fold.reprefill_tokens, fold.reprefill_s = task["reprefill_tokens"], sums["reprefill_s"]
        fold.decisions, fold.attempts, fold.valid_attempts = task["decisions"], task["t_attempts"], task["t_valid_attempts"]
        fold.wall, fold.retry_s, fold.overlap_s = sums["wall_s"], sums["retry_s"], sums["overlap_s"]
        fold.stages = StageTimes(**{f: sums[f"stage_{f}"] for f in STAGE_FIELDS})
        fold.segs = [sums[f"seg_{s}"] for s in SEGMENT_FIELDS]
        fold.retry_segs = [sums[f"retry_{s}"] for s in SEGMENT_FIELDS]
        fold.overlap_segs = [sums[f"overlap_{s}"] for s in SEGMENT_FIELDS]
        cols = ("no_steps", "no_ttvtc", "no_outcome")
        for _, i in sorted((_key(task[f"{c}_first"]), i) for i, c in enumerate(cols) if task[c]):  # first seen first
            fold.not_inferred[_MISSING[i]] = task[cols[i]]
    fold.task_wall, fold.ttvtc = _Known(_dist(task, "task_wall")), _Known(_dist(task, "ttvtc"))
    fold.tca, fold.throughput = _Known(_dist(task, "tca")), _Known(_dist(task, "throughput"))
    if step is not None:
        fold.steps, fold.retried = step["steps"], step["retried"]
    fold.step_wall, fold.step_ttvtc = _Known(_dist(step, "step_wall")), _Known(_dist(step, "step_ttvtc"))
    fold.retry_per_step = _Known(_dist(step, "retry_per_step"))
    fold.step_segments = _Known([_dist(step, f"seg{i}") for i in range(_N)])
    if gens is not None:
        fold.generations, fold.constrained = gens["n"], gens["g_constrained"]
        fold.fallbacks, fold.drafts_cut = gens["g_constrain_fallbacks"], gens["g_drafts_cut"]
        fold.speculation = _spec_sums(gens)
    for row in by_method:
        fold.by_method[row["method"]] = _spec_sums(row)
    fold.tokens_per_s = _Known(_dist(gens, "tokens_per_s"))
    fold.decode_per_token = _Known(_dist(gens, "decode_per_token"))
    fold.acceptance = _Known(_dist(gens, "acceptance"))
    return fold


def made() -> list[str]:
    """Every table the tree and the value tables make (tree.py, summary_sql.py), in order."""
    return tree.created([*tree.statements(), *q.statements()])


# A dotted name quoted in SQL: an attribute key (a figure reads `attrs['gen_ai.request.model']`,
# a narrowed map keeps `k IN ('agenttrace.spec.rounds', ...)`), or a value harmless to count as one.
_QUOTED_NAME = re.compile(r"'([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+)'")


@functools.cache
def read_keys() -> frozenset[str]:
    """The attribute keys a summary's statements read of a span: every dotted name quoted in the
    SQL of the tree, the value tables and the checks asked of them (the aggregates read the value
    tables alone). Found in the SQL itself, so a key a query starts reading is in it."""
    sql = [*tree.statements(), *q.statements(), *(s for _, s in q.checks()), *(s for _, s in coverage.tree_checks()),
           coverage.per_span_tasks()]
    return frozenset(_QUOTED_NAME.findall("\n".join(sql)))


def prepare(engine) -> str | None:
    """The value tables made (`engine`: an Engine whose tree statements ran); the reason the
    aggregates do not cover the input, if one applies (then the summary is made from the rows)."""
    for sql in q.statements():
        engine.q(sql)
    return next((reason for reason, sql in q.checks() if engine.scalar(sql)), None)


def _tables(engine, queries: dict[str, str], keep: dict[str, str]) -> tuple[dict[str, list[dict]], int]:
    tables, back = {}, 0
    for name, sql in queries.items():
        table, n = engine.table(f"SELECT {keep[name]} FROM ({sql})")
        tables[name], back = _records(table), back + n
    return tables, back


def whatif(engine, p: str = "x_") -> tuple[WhatIfFold, int]:
    """The what-if's fold, and the bytes that came back."""
    tables, back = _tables(engine, w.queries(p), w.KEEP)
    return w.whatif_fold(tables), back


def roofline(engine, p: str = "x_") -> tuple[RooflineFold, int]:
    """The roofline's fold, and the bytes that came back."""
    tables, back = _tables(engine, roof.queries(p), roof.KEEP)
    return roof.roofline_fold(tables), back


def _aggregate(engine, sql: str) -> tuple[dict[str, list], int]:
    """One aggregate's rows, and the pages its sorting held given back: in this process the
    allocator keeps them, and the next aggregate's land beside them (10M spans: the step
    aggregates started from 4.5 GB, 1.9 GB of it the task aggregates' freed memory)."""
    out = engine.table(sql)
    engine.store.release_memory()
    return out


def run_folds(engine, p: str = "x_") -> tuple[list[str | None], RunFold, dict[str | None, RunFold], int]:
    """The labels in the order their first task started, the whole run's fold, each label's, and
    the bytes that came back. `engine`: an Engine `prepare` readied (`p`: the value tables'
    prefix)."""
    t_extra = "whole, label, first, tasks, completed, loops, decisions, sub_agents, compactions, reprefill_tokens, t_attempts, t_valid_attempts, t_sums, " + ", ".join(
        f"{c}, {c}_first" for c in ("no_steps", "no_ttvtc", "no_outcome"))
    tasks, b1 = _aggregate(engine, q.keep_columns(q.task_aggregates(p), q.TASK_DISTRIBUTIONS, t_extra))
    steps, b2 = _aggregate(engine, q.keep_columns(q.step_aggregates(p), (*q.STEP_DISTRIBUTIONS, *(f"seg{i}" for i in range(_N))),
                                                  "whole, label, steps, retried"))
    gens, b3 = _aggregate(engine, q.keep_columns(
        q.generation_aggregates(p), q.GEN_DISTRIBUTIONS,
        "whole, all_methods, label, method, n, g_out, g_rounds, g_drafted, g_accepted, g_fallbacks, g_k, g_methods, "
        "g_constrained, g_constrain_fallbacks, g_drafts_cut, " + ", ".join(f"sum_{c}" for c in q.GEN_SUMS)))
    task_rows = {(r["whole"], r["label"] if not r["whole"] else None): r for r in _records(tasks)}
    step_rows = {(r["whole"], r["label"] if not r["whole"] else None): r for r in _records(steps)}
    gen_rows, method_rows = {}, {}
    for r in _records(gens):
        key = (r["whole"], r["label"] if not r["whole"] else None)
        if r["all_methods"]:
            gen_rows[key] = r
        else:
            method_rows.setdefault(key, []).append(r)
    labels = [key[1] for key, _ in sorted(((k, r) for k, r in task_rows.items() if not k[0]), key=lambda kr: _key(kr[1]["first"]))]

    def fold(key: tuple[bool, str | None]) -> RunFold:
        return _fold(task_rows.get(key), step_rows.get(key), gen_rows.get(key),
                     sorted(method_rows.get(key, []), key=lambda r: r["method"]))

    return labels, fold((True, None)), {label: fold((False, label)) for label in labels}, b1 + b2 + b3
