"""The report's figures as columnar queries (issue 32): spans become one table (`load.py`: OTLP/JSON
files read by ClickHouse's engine in this process), the segment attribution, steps, attempts and
decisions are SQL over that table (`tree.py`, `rows.py`), and only per-task, per-step and
per-generation rows come back to Python, where the report's own records and folds
(`report/runs.py`) make the run figures. A summary (`report --sample`) brings back only aggregates
(`summary.py`): the folds are filled from them, with no row per task.

What the SQL does not cover yet is listed in `coverage.py`; an input that needs it is reported by
the per-span path instead, so the figures never depend on which engine ran.
"""
