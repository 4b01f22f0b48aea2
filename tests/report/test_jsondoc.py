"""The JSON report written a task at a time (report/jsondoc.py) is the whole document's text,
byte for byte, and writing it holds one task's text, not a second copy of the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenttrace.report import report_from_files
from agenttrace.report.model import Report

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


@pytest.fixture(scope="module")
def report() -> Report:
    return report_from_files([str(SAMPLES)])


@pytest.mark.parametrize("tasks", [None, 0, 1])
def test_the_pieces_are_the_whole_document(report, tasks):
    doc = report if tasks is None else report.model_copy(update={"tasks": report.tasks[:tasks]})
    assert len(doc.tasks) == (len(report.tasks) if tasks is None else tasks)
    pieces = list(doc.iter_json(indent=2))
    assert "".join(pieces) == doc.model_dump_json(indent=2)
    assert len(pieces) == len(doc.tasks) + 2 if doc.tasks else len(pieces) == 1


def test_a_lone_surrogate_in_one_task_is_written_as_the_whole_document_writes_it(report):
    odd = report.tasks[1].model_copy(update={"task_id": "x\ud800y"})
    doc = report.model_copy(update={"tasks": [report.tasks[0], odd, *report.tasks[2:]], "sources": ["a\udc00"]})
    text = "".join(doc.iter_json(indent=2))
    assert text == doc.model_dump_json(indent=2)
    assert json.loads(text)["tasks"][1]["task_id"] == "x\ufffdy"


def test_a_task_field_named_like_the_list_does_not_move_the_split(report):
    # the marker is the top-level key at one indent; the same words inside a value stay put
    odd = report.tasks[0].model_copy(update={"task_id": '\n  "tasks": []'})
    doc = report.model_copy(update={"tasks": [odd], "sources": ['"tasks": []']})
    assert "".join(doc.iter_json(indent=2)) == doc.model_dump_json(indent=2)


def test_the_command_writes_the_same_json_to_stdout_and_to_a_file(tmp_path, capsys):
    from agenttrace.cli import main

    assert main(["report", str(SAMPLES), "--format", "json"]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "r.json"
    assert main(["report", str(SAMPLES), "--format", "json", "-o", str(out)]) == 0
    assert printed == out.read_text() + "\n"
    assert json.loads(printed)["tasks"]
