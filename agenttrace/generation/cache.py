"""agenttrace's cache folder, in a module of its own: the model loader, llama.cpp's library copy,
its kernel probe and the prompt store all keep files there, and the loader imports the backend."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["cache_dir", "read_json", "write_json", "write_json_at"]


def cache_dir() -> Path:
    """Where converted models live: $AGENTTRACE_CACHE_DIR or the user cache dir."""
    env = os.environ.get("AGENTTRACE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("agenttrace"))


def read_json(name: str) -> dict:
    """A JSON object the cache keeps under `name` (a decision measured once: the kernel path, the
    backend), or {} when it is missing or unreadable."""
    try:
        data = json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(name: str, data: dict) -> bool:
    """Keep `data` under `name`, written to a temporary file and renamed (a reader never sees half
    of it); False when the cache cannot be written (the next process measures again)."""
    try:
        write_json_at(cache_dir() / name, data)
    except OSError:
        return False
    return True


def write_json_at(path: Path, data: dict) -> None:
    """`data` into `path`, written to a temporary sibling and renamed, so another process (a
    second test worker, a second agent) never reads half of it. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
