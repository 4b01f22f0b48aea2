from __future__ import annotations

import pytest

from agenttrace import ToolError
from agenttrace.examples.tools.units import convert


@pytest.mark.parametrize(
    ("value", "src", "dst", "result"),
    [
        (10, "km", "mi", 6.213712),
        (150, "lb", "kg", 68.038856),
        (37, "C", "F", 98.6),
        (0, "K", "C", -273.15),
        (5, "gal", "l", 18.927059),
        (60, "mph", "km/h", 96.56064),
        (3, "h", "min", 180),
        (2, "GiB", "MB", 2147.483648),
    ],
)
def test_conversions(value, src, dst, result):
    assert convert(value, src, dst)["result"] == pytest.approx(result)


def test_incompatible_units_and_impossible_values():
    with pytest.raises(ToolError, match="cannot convert km"):
        convert(1, "km", "kg")
    with pytest.raises(ToolError, match="only C, F and K"):
        convert(1, "C", "km")
    with pytest.raises(ToolError, match="below absolute zero"):
        convert(-500, "C", "K")
