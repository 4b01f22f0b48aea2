"""The file-search tool stays inside its sandbox root, whatever the tree holds or does meanwhile."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from agenttrace.examples.tools.file_search import make_file_search

from agenttrace import CancelToken, ToolError
from agenttrace.clock import default_clock, elapsed_s
from agenttrace.core.chat import task_cancel
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
    os.symlink(root / "notes", root / "inner_link")
    for link in ("link_dir", "link_dir/deeper", "inner_link"):  # a link is refused wherever it points
        with pytest.raises(ToolFailed, match="symbolic link.*outside the search root"):
            search(root, query="budget", path=link)
    found = search(root, query="secret")
    assert found["matches"] == []  # the symlinked file and folder are never opened
    texts = [m["text"] for m in search(root, query="budget")["matches"]]
    assert not any("hunter2" in t for t in texts)


def test_a_missing_folder_is_a_clear_error(sandbox):
    root, _ = sandbox
    with pytest.raises(ToolFailed, match="no folder 'nope'"):
        search(root, query="x", path="nope")


def test_a_folder_swapped_for_a_link_in_a_loop_never_leaks_what_is_outside(tmp_path):
    """The issue's probe: a thread keeps swapping a folder of the sandbox for a link to a folder
    outside it while searches run (the old check-then-open leaked 22 of 5,000 calls)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "docs").mkdir(parents=True)
    outside.mkdir()
    (root / "docs" / "f.txt").write_text("needle inside\n")
    (outside / "f.txt").write_text("needle SECRET\n")
    docs, hidden, link = root / "docs", root / ".hidden", root / ".link"
    stop, swaps = threading.Event(), [0]

    def swap_forever():
        while not stop.is_set():
            os.symlink(outside, link)
            os.rename(docs, hidden)
            os.rename(link, docs)  # docs leads outside now
            os.rename(docs, link)
            os.rename(hidden, docs)  # docs is the real folder again
            os.unlink(link)
            swaps[0] += 1

    swapper = threading.Thread(target=swap_forever, daemon=True)
    swapper.start()
    tool = make_file_search(root)
    escapes = found = 0
    try:
        for i in range(1500):
            try:
                result = run_tool(tool, {"query": "needle", "path": "docs" if i % 2 else ".", "max_results": 20})
            except ToolFailed as exc:  # docs asked for while it was a link, or while it was renamed
                assert "outside the search root" in str(exc) or "no folder" in str(exc)
                continue
            texts = [m["text"] for m in result["matches"]]
            escapes += any("SECRET" in t for t in texts)
            found += "needle inside" in texts
    finally:
        stop.set()
        swapper.join()
    assert escapes == 0
    assert found > 100 and swaps[0] > 100  # searches and swaps really interleaved


def test_symlink_loops_do_not_make_searches_fail(sandbox):
    root, _ = sandbox
    os.symlink("b", root / "notes" / "a_loop")
    os.symlink("a_loop", root / "notes" / "b")
    os.symlink("self", root / "self")
    os.symlink(".", root / "notes" / "here")
    os.symlink("..", root / "notes" / "up")
    result = search(root, query="budget")
    assert [(m["path"], m["line"]) for m in result["matches"]] == [("b.md", 1), ("notes/a.txt", 1)]
    assert result["note"] == "5 symbolic links not followed" and result["truncated"] is False


def _deep_tree(root, depth):
    """root/top.txt and root/d/d/.../d/bottom.txt, `depth` folders down (made through descriptors:
    the path is longer than the system takes)."""
    root.mkdir()
    (root / "top.txt").write_text("needle at the top\n")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def _remove_deep_tree(root):
    # shutil.rmtree (and so pytest's clean-up of old temporary folders) recurses once per level:
    # go down through descriptors, then back up through `..`, removing each level on the way
    fd, depth = os.open(root, os.O_RDONLY | os.O_DIRECTORY), 0
    while "d" in os.listdir(fd):
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd, depth = child, depth + 1
    os.unlink("bottom.txt", dir_fd=fd)
    for _ in range(depth):
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = parent
        os.rmdir("d", dir_fd=fd)
    os.close(fd)
    (root / "top.txt").unlink()


@pytest.fixture
def memory_dir(tmp_path):
    """A folder in memory where the machine has one (/dev/shm): on a disk, making and removing
    1,800 nested folders takes seconds."""
    if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
        yield tmp_path
        return
    folder = tempfile.mkdtemp(dir="/dev/shm", prefix="agenttrace-test-")
    try:
        yield Path(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_folder_1800_levels_deep_is_cut_with_a_note_and_returns_at_once(memory_dir):
    root = memory_dir / "root"
    _deep_tree(root, 1800)
    try:
        tool = make_file_search(root)
        start = default_clock().now_ns()
        result = run_tool(tool, {"query": "needle", "max_results": 20})
        assert elapsed_s(default_clock(), start) < 1.0  # the old walk timed out every call (5 s)
        assert [m["path"] for m in result["matches"]] == ["top.txt"]
        assert result["truncated"] is True
        assert result["note"] == "1 folder deeper than 32 levels not searched"
        inner = run_tool(tool, {"query": "needle", "path": "/".join(["d"] * 30)})
        assert inner["matches"] == [] and inner["note"] == "1 folder deeper than 32 levels not searched"
        with pytest.raises(ToolFailed, match="33 folders deep; the search goes at most 32"):
            run_tool(tool, {"query": "needle", "path": "/".join(["d"] * 33)})
    finally:
        _remove_deep_tree(root)


def test_a_cancelled_task_stops_the_search(sandbox):
    """Tools run in a copy of the caller's context: the task's cancel token reaches the walk."""
    root, _ = sandbox
    token = CancelToken()
    token.cancel()
    with task_cancel(token):
        result = search(root, query="budget")
    assert result["matches"] == [] and result["truncated"] is True
    assert result["note"] == "stopped: the call was cancelled"
    assert not any(t.name == "tool-search_files" and t.is_alive() for t in threading.enumerate())


def test_names_that_are_not_utf8_come_back_as_encodable_text(sandbox):
    root, _ = sandbox
    with open(os.path.join(os.fsencode(root / "notes"), b"caf\xe9-budget.txt"), "w") as f:
        f.write("budget line\n")
    result = search(root, query="budget", max_results=20)
    json.dumps(result, ensure_ascii=False).encode("utf-8")  # the prompt and the spans need this
    assert {"path": "notes/caf\ufffd-budget.txt", "line": 1, "text": "budget line"} in result["matches"]


def test_a_timed_out_search_stops_reading_at_once(tmp_path, monkeypatch):
    """The issue's probe: a search that outlives its timeout used to read on for seconds after
    the call returned (its thread cannot be killed). Now the call's token is cancelled at the
    timeout and the walk stops at its next file."""
    from agenttrace.examples.tools import sandbox

    root = tmp_path / "root"
    root.mkdir()
    for n in range(200):
        (root / f"{n:03d}.txt").write_text("nothing\n")
    reads = []
    plain_read = sandbox.SandboxFile.read

    def slow_read(self):  # a slow disk: 200 files take 2 s
        reads.append(self.path)
        threading.Event().wait(0.01)
        return plain_read(self)

    monkeypatch.setattr(sandbox.SandboxFile, "read", slow_read)
    with pytest.raises(ToolFailed, match="no result within 0.2 s"):
        run_tool(make_file_search(root), {"query": "needle"}, timeout_s=0.2)
    returned = default_clock().now_ns()
    while any(t.name == "tool-search_files" and t.is_alive() for t in threading.enumerate()):
        threading.Event().wait(0.005)
    assert elapsed_s(default_clock(), returned) < 0.1
    assert len(reads) < 40
