"""Search text files under a sandbox root by name and content.

Every path is resolved (symlinks followed) and must stay inside the root: `..`, absolute paths
and symlinks that point outside are rejected for the folder asked for, and skipped silently
while walking, so no file outside the sandbox is ever opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agenttrace import Tool, ToolError

DEFAULT_ROOT = Path(__file__).parent / "data" / "sandbox"
MAX_FILE_BYTES = 1_000_000  # larger files are skipped: this is a notes search, not grep over logs


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_in_sandbox(root: Path, relative: str) -> Path:
    """The real path of `relative` under `root`; ToolError if it is absolute or escapes."""
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolError(f"path {relative!r} must be relative to the search root")
    real_root = root.resolve()
    target = (real_root / relative).resolve()
    if not _inside(target, real_root):
        raise ToolError(f"path {relative!r} is outside the search root")
    if not target.is_dir():
        raise ToolError(f"no folder {relative!r} under the search root")
    return target


def search_files(root: Path, query: str, path: str = ".", max_results: int = 5) -> dict[str, Any]:
    real_root = root.resolve()
    start = resolve_in_sandbox(root, path)
    needle = query.casefold()
    matches: list[dict[str, Any]] = []
    for folder, dirs, files in os.walk(start):
        dirs.sort()
        # Do not descend into symlinked folders that lead outside (os.walk does not follow them
        # by default, but a folder we start in could be reached through one).
        dirs[:] = [d for d in dirs if _inside((Path(folder) / d).resolve(), real_root)]
        for name in sorted(files):
            file = Path(folder) / name
            real = file.resolve()
            if not _inside(real, real_root) or not real.is_file() or real.stat().st_size > MAX_FILE_BYTES:
                continue
            rel = file.relative_to(real_root).as_posix()
            if needle in name.casefold():
                matches.append({"path": rel, "line": None, "text": name})
            try:
                lines = real.read_text(encoding="utf-8").splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(lines, 1):
                if needle in line.casefold():
                    matches.append({"path": rel, "line": n, "text": line.strip()[:200]})
            if len(matches) >= max_results:
                return {"query": query, "matches": matches[:max_results], "truncated": True}
    return {"query": query, "matches": matches, "truncated": False}


def make_file_search(root: str | os.PathLike[str] = DEFAULT_ROOT) -> Tool:
    """A file-search tool confined to `root`."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"file search root {root} is not a folder")

    def run(query: str, path: str = ".", max_results: int = 5) -> dict[str, Any]:
        return search_files(root, query, path, max_results)

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
        timeout_s=5.0,
    )


file_search = make_file_search()
