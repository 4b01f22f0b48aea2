"""Reports: figures computed from traces (SPANS.md) and their renderings. Imports neither
torch nor transformers, so reports run anywhere the traces are.

    inputs.py    files, folders and Jaeger's query API -> spans
    span_tree.py span trees, intervals, the critical path (as Jaeger's UI computes it)
    segments.py  wall time by segment, following the critical path where children overlap
    spec.py      per-generation speculation figures and acceptance statistics
    figures.py   spans -> per-task and per-step figures
    runs.py      run figures, overall and per run label
    stats.py     percentiles, bootstrap ratio of medians (shared with the benchmarks)
    whatif.py    expected speedup by k (Leviathan et al. 2023)
    compare.py   A/B comparison figure by figure
    model.py     the figures as pydantic models (the JSON schema)
    terminal.py, markdown.py, html.py (+ charts.py)   renderings
"""

from agenttrace.report.build import build_report, report_from_files
from agenttrace.report.model import Report

__all__ = ["Report", "build_report", "report_from_files"]
