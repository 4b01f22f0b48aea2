"""A full report's task records, made a chunk of tasks at a time (engine.py's figures).

The rows (`rows.py`, `runs_sql.task_runs`) are first kept in the engine as tables, each row with
its task's chunk (`CHUNK_TASKS` tasks in the report's order); then the span tree's tables go, and
the rows come back one chunk at a time, made into records (assemble.analyses) before the next
chunk's come. Python holds one chunk's rows beside the records, not every row: at 1M spans every
row at once held ~0.7 GB beside the span tree's tables (measured).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agenttrace.columnar import rows, runs_sql
from agenttrace.columnar.assemble import add_critical_paths, analyses, pivot, task_runs
from agenttrace.report.figures import TaskAnalysis


class Engine(Protocol):
    """What is asked of engine.py's Engine here (named, not imported: it imports this module)."""

    def q(self, sql: str, params: dict | None = None) -> None: ...

    def table(self, sql: str) -> tuple[dict[str, list], int]: ...

    def scalar(self, sql: str) -> int: ...


CHUNK_TASKS = 10_000
_TASKS = "r_tasks"  # the task rows, with their chunk
# name -> (the rows' query, the order a chunk's rows come back in, the columns that stay in the engine)
_ROWS = {
    "steps": (rows.step_rows, "task, start_ns, step", ""),
    "attempts": (rows.attempt_rows, "task", ""),
    "gens": (rows.generation_rows, "task, step, walk", ", walk"),
    "segs": (rows.segment_times, "kind, owner", ""),
    "path": (rows.path_spans, "task, i", ""),
    "runs": (runs_sql.task_runs, "task", ""),
}


@dataclass
class Made:
    """The records in the report's order, each with its order key (start, then input order), and
    the bytes of the rows that came back."""

    records: list[TaskAnalysis] = field(default_factory=list)
    keys: list[tuple[int, int]] = field(default_factory=list)
    bytes_back: int = 0


def keep(engine: Engine) -> list[str]:
    """The rows into the engine's tables, each row with its task's chunk; the tables made."""
    engine.q(f"""CREATE TEMPORARY TABLE {_TASKS} ENGINE = Memory AS
SELECT *, intDiv(row_number() OVER (ORDER BY start_ns, task) - 1, {CHUNK_TASKS}) AS chunk FROM ({rows.task_rows()})""")
    made = [_TASKS]
    held = engine.scalar(runs_sql.held())
    for name, (query, _, _) in _ROWS.items():
        if name == "runs" and not held:
            continue
        engine.q(f"""CREATE TEMPORARY TABLE r_{name} ENGINE = Memory AS
SELECT q.*, k.chunk AS chunk FROM ({query()}) AS q JOIN (SELECT task, chunk FROM {_TASKS}) AS k ON k.task = q.task""")
        made.append(f"r_{name}")
    return made


def records(engine: Engine, kept: list[str], given: dict[int, TaskAnalysis]) -> Made:
    """Every task's record, a chunk at a time (`given`: those the per-span code made)."""
    out = Made()
    chunks = engine.scalar(f"SELECT if(count() = 0, 0, max(chunk) + 1) FROM {_TASKS}")
    for chunk in range(chunks):
        tasks = _rows(engine, out, _TASKS, chunk, "start_ns, task")
        part = {name: _rows(engine, out, f"r_{name}", chunk, order, extra) if f"r_{name}" in kept else None
                for name, (_, order, extra) in _ROWS.items()}
        made = analyses(tasks, part["steps"], part["attempts"], part["gens"], pivot(part["segs"]), given,
                        task_runs(part["runs"]) if part["runs"] else {})
        add_critical_paths({t: a.figures for t, a in zip(tasks["task"], made, strict=True) if t not in given},
                           part["path"])
        out.records += made
        out.keys += zip(tasks["start_ns"], tasks["task"], strict=True)
    return out


def _rows(engine: Engine, out: Made, table: str, chunk: int, order: str, extra: str = "") -> dict[str, list]:
    got, nbytes = engine.table(f"SELECT * EXCEPT (chunk{extra}) FROM {table} WHERE chunk = {chunk} ORDER BY {order}")
    out.bytes_back += nbytes
    return got
