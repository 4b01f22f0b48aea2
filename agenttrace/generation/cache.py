"""agenttrace's cache folder, in a module of its own: the model loader, llama.cpp's library copy,
its kernel probe and the prompt store all keep files there, and the loader imports the backend."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """Where converted models live: $AGENTTRACE_CACHE_DIR or the user cache dir."""
    env = os.environ.get("AGENTTRACE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("agenttrace"))
