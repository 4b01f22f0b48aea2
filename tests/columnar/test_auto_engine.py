"""`agenttrace report FILES` under `--engine auto` (the default): a full report of large files of our
own spans is made by the columnar engine where its peak fits in memory; small files, files of
another instrumentation's traces, and files too large for the memory available stay on the
per-span path. The report is the same either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from agenttrace.cli import main
from agenttrace.columnar import engine
from agenttrace.commands import report as command

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "traces" / "samples"
FOREIGN = ROOT / "traces" / "frameworks" / "autogen-openinference.jsonl"


@pytest.fixture
def engine_calls(monkeypatch) -> list[list[str]]:
    """The files each columnar report was asked of."""
    calls: list[list[str]] = []
    real = engine.report_files

    def spy(paths, **kwargs):
        calls.append([str(p) for p in paths])
        return real(paths, **kwargs)

    monkeypatch.setattr(engine, "report_files", spy)
    return calls


def _report(capsys, *args: str) -> dict:
    assert main(["report", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_auto_reports_large_files_of_ours_in_the_engine(capsys, monkeypatch, engine_calls):
    python = _report(capsys, str(SAMPLES), "--engine", "python")
    assert _report(capsys, str(SAMPLES)) == python and engine_calls == []  # small: the per-span path
    monkeypatch.setattr(command, "REPORT_MIN_BYTES", 0)  # as if they were large
    assert _report(capsys, str(SAMPLES)) == python and engine_calls == [[str(SAMPLES)]]
    # another instrumentation's traces: the per-span code reads them in either engine
    assert _report(capsys, str(FOREIGN)) == _report(capsys, str(FOREIGN), "--engine", "python")
    assert len(engine_calls) == 1
    # no room for the engine's peak
    monkeypatch.setattr(command, "_available_bytes", lambda: 2 * command.REPORT_BASE_BYTES)
    assert _report(capsys, str(SAMPLES)) == python and len(engine_calls) == 1
