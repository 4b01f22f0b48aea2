"""The formats' own example files, which live beside the repo in ../shared/fixtures (they are
not copied into it). A test that needs one skips, saying why, on a clone of the repo alone."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def shared_fixture(name: str) -> Path:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: the formats' example files are read from ../shared/fixtures beside the repo")
    return path
