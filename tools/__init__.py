"""Reference tools with JSON-schema arguments: offline and deterministic, built only on
agenttrace's public API (`Tool`, `ToolError`), as a user's own tools would be."""

from __future__ import annotations

import os

from agenttrace import Tool
from agenttrace.examples.tools.calculator import calculator
from agenttrace.examples.tools.file_search import DEFAULT_ROOT, make_file_search
from agenttrace.examples.tools.units import unit_converter
from agenttrace.examples.tools.weather import weather

__all__ = ["calculator", "default_tools", "make_file_search", "unit_converter", "weather"]


def default_tools(sandbox_root: str | os.PathLike[str] = DEFAULT_ROOT) -> list[Tool]:
    """The four reference tools, the file search confined to `sandbox_root`."""
    return [calculator, weather, unit_converter, make_file_search(sandbox_root)]
