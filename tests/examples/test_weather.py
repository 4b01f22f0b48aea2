from __future__ import annotations

import pytest

from agenttrace import ToolError
from agenttrace.examples.tools.weather import lookup


def test_lookup_is_case_insensitive_and_converts_units():
    assert lookup("paris")["condition"] == "light rain"
    assert lookup(" New York ")["temperature"] == 9.5
    assert lookup("Sydney", "fahrenheit")["temperature"] == pytest.approx(78.8)


def test_unknown_city_lists_the_known_ones():
    with pytest.raises(ToolError, match="no weather data for 'Atlantis'; cities with data: Beijing"):
        lookup("Atlantis")
