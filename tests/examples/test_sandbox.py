"""The sandbox walk: opened through directory handles, links never followed, bounded, cancellable."""

from __future__ import annotations

import contextlib
import os

import pytest
from agenttrace.examples.tools.file_search import search_files
from agenttrace.examples.tools.sandbox import DEFAULT_LIMITS, SandboxLimits, WalkStats, walk

from agenttrace import CancelToken, ToolError
from agenttrace.core.chat import task_cancel


@pytest.fixture
def tree(tmp_path):
    """root/a.txt, root/docs/{1,2,3}.txt, root/docs/sub/4.txt; outside/secret.txt beside root."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "docs" / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "a.txt").write_text("needle a\n")
    for n in (1, 2, 3):
        (root / "docs" / f"{n}.txt").write_text(f"needle {n}\n")
    (root / "docs" / "sub" / "4.txt").write_text("needle 4\n")
    (outside / "secret.txt").write_text("needle SECRET\n")
    return root, outside


def read_all(root, path=".", limits=DEFAULT_LIMITS, **kw):
    stats = WalkStats()
    with contextlib.closing(walk(root, path, limits, stats, **kw)) as files:
        seen = [(f.path, f.read()) for f in files]
    return seen, stats


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_files_come_in_os_walk_order_and_every_descriptor_is_released(tree):
    root, _ = tree
    before = open_descriptors()
    seen, stats = read_all(root)
    assert seen == [("a.txt", b"needle a\n"), ("docs/1.txt", b"needle 1\n"), ("docs/2.txt", b"needle 2\n"),
                    ("docs/3.txt", b"needle 3\n"), ("docs/sub/4.txt", b"needle 4\n")]
    assert stats.files_read == 5 and not stats.cut() and stats.note(SandboxLimits()) is None
    with contextlib.closing(walk(root, ".", SandboxLimits(), WalkStats())) as files:
        next(files), next(files)  # left mid-tree, two folders open
    assert open_descriptors() == before


def test_a_folder_swapped_for_a_link_after_it_was_listed_is_not_entered(tree):
    """The check-then-use window, made to happen every time: docs is listed as a folder, then
    swapped for a link to outside before the walk opens it."""
    root, outside = tree
    stats = WalkStats()
    seen = []
    with contextlib.closing(walk(root, ".", SandboxLimits(), stats)) as files:
        for file in files:
            if file.path == "a.txt":
                os.rename(root / "docs", root / "moved")
                os.symlink(outside, root / "docs")
            seen.append(file.read())
    assert seen == [b"needle a\n"] and stats.symlinks_skipped == 1


def test_a_folder_swapped_while_the_walk_is_inside_it_stays_the_one_opened(tree):
    root, outside = tree
    seen = []
    with contextlib.closing(walk(root, "docs", SandboxLimits(), WalkStats())) as files:
        for file in files:
            if file.path == "docs/1.txt":
                os.rename(root / "docs", root / "moved")
                os.symlink(outside, root / "docs")
            seen.append(file.read())
    assert seen == [b"needle 1\n", b"needle 2\n", b"needle 3\n", b"needle 4\n"]


def test_a_file_swapped_for_a_link_after_it_was_listed_is_not_read(tree):
    root, outside = tree
    stats = WalkStats()
    with contextlib.closing(walk(root, "docs", SandboxLimits(), stats)) as files:
        first = next(files)
        os.rename(root / "docs" / "1.txt", root / "docs" / "gone.txt")
        os.symlink(outside / "secret.txt", root / "docs" / "1.txt")
        assert first.read() is None
    assert stats.symlinks_skipped == 1 and stats.files_read == 0


def test_fifos_are_never_opened(tree):
    root, _ = tree
    os.mkfifo(root / "docs" / "0-pipe.txt")  # opening it to read would block for ever
    seen, _ = read_all(root, "docs")
    assert [p for p, _ in seen] == ["docs/1.txt", "docs/2.txt", "docs/3.txt", "docs/sub/4.txt"]


@pytest.mark.parametrize(("path", "message"), [
    ("docs/../..", "outside the search root"),
    ("docs\0", "NUL character"),
    ("a.txt", "no folder 'a.txt'"),
    ("x" * 300, "no folder 'xxxx"),
])
def test_the_folder_asked_for_is_checked_on_its_names(tree, path, message):
    root, _ = tree
    with pytest.raises(ToolError, match=message):
        read_all(root, path)


def test_dot_dot_that_stays_inside_is_resolved_on_the_names(tree):
    root, _ = tree
    assert [p for p, _ in read_all(root, "docs/sub/../..")[0]][:2] == ["a.txt", "docs/1.txt"]


def test_each_limit_cuts_the_walk_and_says_so(tree):
    root, _ = tree
    seen, stats = read_all(root, limits=SandboxLimits(max_files=2))
    assert len(seen) == 2 and stats.note(SandboxLimits(max_files=2)) == (
        "stopped after reading 2 files (the most one search reads)")
    seen, stats = read_all(root, limits=SandboxLimits(max_entries=3))
    assert [p for p, _ in seen] == ["a.txt"] and "listing 3 names" in stats.stopped
    limits = SandboxLimits(max_depth=1)
    seen, stats = read_all(root, limits=limits)
    assert [p for p, _ in seen][-1] == "docs/3.txt" and stats.note(limits) == (
        "1 folder deeper than 1 levels not searched")
    (root / "big.txt").write_bytes(b"x" * 11)
    limits = SandboxLimits(max_file_bytes=10)
    seen, stats = read_all(root, limits=limits)
    assert ("big.txt", None) in seen and stats.note(limits) == "1 file over 10 bytes not read"


class CancelAfter(CancelToken):
    """Reads as cancelled from its `n`th check on: a cancel arriving mid-walk, at a known point
    (the walk checks once per file and once per folder)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.checks, self.n = 0, n

    @property
    def cancelled(self) -> bool:
        self.checks += 1
        return self.checks >= self.n


def test_a_cancel_stops_the_walk_at_the_next_file(tree):
    root, _ = tree
    token = CancelAfter(4)
    seen, stats = read_all(root, cancel=token)
    assert len(seen) == 2 and stats.stopped == "stopped: the call was cancelled" and token.checks == 4


def test_the_search_sees_the_tasks_cancel_token_mid_walk(tree):
    root, _ = tree
    with task_cancel(CancelAfter(4)):
        result = search_files(root, "needle", max_results=20)
    assert [m.text for m in result.matches] == ["needle a", "needle 1"]
    assert result.truncated and result.note == "stopped: the call was cancelled"


class StepClock:
    """One second later at every reading."""

    def __init__(self) -> None:
        self.now = 0

    def now_ns(self) -> int:
        self.now += 1_000_000_000
        return self.now


def test_the_time_budget_cuts_the_walk_with_what_was_found(tree):
    root, _ = tree
    result = search_files(root, "needle", max_results=20, limits=SandboxLimits(time_budget_s=4), clock=StepClock())
    assert [m.text for m in result.matches] == ["needle a", "needle 1"]
    assert result.truncated and result.note == "stopped after 4 s (the time one search may take)"
