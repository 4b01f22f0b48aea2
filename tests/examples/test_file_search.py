"""The file-search tool stays inside its sandbox root."""

from __future__ import annotations

import os

import pytest
from agenttrace.examples.tools.file_search import make_file_search

from agenttrace import ToolError
from agenttrace.errors import ToolFailed
from agenttrace.runtime.execution import run_tool


@pytest.fixture
def sandbox(tmp_path):
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.txt").write_text("the budget is 400\nnothing here\n")
    (root / "b.md").write_text("Budget review on Monday\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("budget secret: hunter2\n")
    return root, outside


def search(root, **args):
    return run_tool(make_file_search(root), args)


def test_finds_lines_and_names_case_insensitively(sandbox):
    root, _ = sandbox
    result = search(root, query="BUDGET")
    assert [(m["path"], m["line"]) for m in result["matches"]] == [("b.md", 1), ("notes/a.txt", 1)]
    assert search(root, query="a.txt")["matches"][0] == {"path": "notes/a.txt", "line": None, "text": "a.txt"}
    assert search(root, query="budget", path="notes")["matches"] == [
        {"path": "notes/a.txt", "line": 1, "text": "the budget is 400"}
    ]
    assert search(root, query="budget", max_results=1)["truncated"] is True


@pytest.mark.parametrize("path", ["..", "../outside", "notes/../../outside", "/etc", "~", "~/.ssh"])
def test_path_traversal_is_rejected(sandbox, path):
    root, _ = sandbox
    with pytest.raises(ToolFailed) as err:
        search(root, query="budget", path=path)
    assert "search root" in str(err.value)
    assert isinstance(err.value.__cause__, ToolError)


def test_symlink_escapes_are_rejected_or_skipped(sandbox):
    root, outside = sandbox
    os.symlink(outside, root / "link_dir")
    os.symlink(outside / "secret.txt", root / "notes" / "leak.txt")
    with pytest.raises(ToolFailed, match="outside the search root"):
        search(root, query="budget", path="link_dir")
    found = search(root, query="secret")
    assert found["matches"] == []  # the symlinked file and folder are never opened
    texts = [m["text"] for m in search(root, query="budget")["matches"]]
    assert not any("hunter2" in t for t in texts)


def test_a_missing_folder_is_a_clear_error(sandbox):
    root, _ = sandbox
    with pytest.raises(ToolFailed, match="no folder 'nope'"):
        search(root, query="x", path="nope")
