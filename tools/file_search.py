"""Search text files under a sandbox root by name and content.

The walk (`sandbox.py`) opens every folder and file relative to its parent's descriptor without
following links, so no file outside the root is ever opened, even while folders are swapped for
links mid-search. `..` that leaves the root, absolute paths and a folder asked for through a link
are refused; links met while walking are skipped. The walk is bounded (depth, names, files, time)
and stops when the call is cancelled: the result then says what was not searched (`note`) rather
than the call failing or timing out.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agenttrace.examples.tools.sandbox import DEFAULT_LIMITS, SandboxLimits, WalkStats, supported, walk

from agenttrace import Tool
from agenttrace.clock import Clock
from agenttrace.core.chat import current_cancel

__all__ = ["DEFAULT_ROOT", "TIMEOUT_S", "Match", "SandboxLimits", "SearchResult", "file_search", "make_file_search",
           "search_files"]

DEFAULT_ROOT = Path(__file__).parent / "data" / "sandbox"
TIMEOUT_S = 5.0  # the tool's timeout; SandboxLimits.time_budget_s stays under it
LINE_CHARS = 200  # of a matching line shown to the model


@dataclass(frozen=True)
class Match:
    """A file whose name matches (`line` None, `text` the name) or one matching line of it."""

    path: str
    line: int | None
    text: str


@dataclass(frozen=True)
class SearchResult:
    """What one search found. `truncated`: there may be more matches (max_results reached, or
    part of the tree not searched); `note`: what was not searched, for the model, or None."""

    query: str
    matches: list[Match]
    truncated: bool
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The tool's result: query, matches, truncated, and note only when there is one (the
        result of a search that skipped nothing is what it always was)."""
        out = asdict(self)
        if self.note is None:
            del out["note"]
        return out


def search_files(root: str | os.PathLike[str], query: str, path: str = ".", max_results: int = 5,
                 limits: SandboxLimits = DEFAULT_LIMITS, clock: Clock | None = None) -> SearchResult:
    """Files under folder `path` of `root` whose name or lines contain `query` (case-insensitive),
    at most `max_results`, in walk order (each folder's files by name, then its subfolders).

    ToolError when `path` is absolute, leaves the root, goes through a link or is not a folder.
    Never fails on what the tree holds (links, loops, depth, huge or unreadable files): those are
    skipped or cut and said in `note`. Stops early, with what it found, when `limits.time_budget_s`
    has passed or the call's cancel token is set (`current_cancel()`: for a tool on a thread the
    runtime cancels it when the call times out or the task is cancelled).
    """
    needle = query.casefold()
    matches: list[Match] = []
    stats = WalkStats()
    files = walk(root, path, limits, stats, cancel=current_cancel(), clock=clock)
    with contextlib.closing(files):
        for file in files:
            shown = _printable(file.path)
            if needle in file.name.casefold():
                matches.append(Match(shown, None, _printable(file.name)))
            data = file.read()
            if data is not None:
                matches.extend(_matching_lines(shown, data, needle))
            if len(matches) >= max_results:
                return SearchResult(query, matches[:max_results], True, stats.note(limits))
    return SearchResult(query, matches, stats.cut(), stats.note(limits))


def _matching_lines(path: str, data: bytes, needle: str) -> list[Match]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # not a text file
        return []
    # casefold maps character by character, so a line holding the needle means the whole text does:
    # most files are ruled out without splitting them into lines
    if needle not in text.casefold():
        return []
    return [Match(path, n, line.strip()[:LINE_CHARS]) for n, line in enumerate(text.splitlines(), 1)
            if needle in line.casefold()]


def _printable(name: str) -> str:
    # A name that is not UTF-8 comes from the system with surrogate escapes, which no JSON
    # encoder downstream (the model's prompt, the span exporters) can encode.
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def make_file_search(root: str | os.PathLike[str] = DEFAULT_ROOT, limits: SandboxLimits = DEFAULT_LIMITS) -> Tool:
    """A file-search tool confined to `root` (a folder; links in its own path are followed, as
    configuration), each search bounded by `limits`."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"file search root {root} is not a folder")
    if not supported():
        raise ValueError("file search needs files opened relative to folder descriptors (Linux, macOS)")

    def run(query: str, path: str = ".", max_results: int = 5) -> dict[str, Any]:
        return search_files(root, query, path, max_results, limits).as_json()

    return Tool(
        name="search_files",
        description="Find lines containing a word in the user's notes and documents.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "path": {"type": "string", "description": "folder to search, relative; default ."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        function=run,
        timeout_s=TIMEOUT_S,
    )


file_search = make_file_search()
