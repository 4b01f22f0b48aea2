"""Reports: figures computed from traces (SPANS.md) and their renderings. Imports neither
torch nor transformers, so reports run anywhere the traces are.

    model.py     the figures as pydantic models (the JSON schema)
    tree.py      span trees, self time, critical path
    figures.py   spans -> figures
    terminal.py  rich tables
"""

from agenttrace.report.figures import build_report, report_from_files
from agenttrace.report.model import Report

__all__ = ["Report", "build_report", "report_from_files"]
