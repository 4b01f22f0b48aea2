"""Current weather for a city, from a fixed dataset shipped with the repo (offline, reproducible)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from agenttrace import Tool, ToolError

DATA = Path(__file__).parent / "data" / "weather.json"


@lru_cache(maxsize=1)
def _stations() -> dict[str, dict[str, Any]]:
    rows = json.loads(DATA.read_text(encoding="utf-8"))
    return {row["city"].casefold(): row for row in rows}


def lookup(city: str, unit: str = "celsius") -> dict[str, Any]:
    row = _stations().get(city.strip().casefold())
    if row is None:
        known = ", ".join(sorted(r["city"] for r in _stations().values()))
        raise ToolError(f"no weather data for {city!r}; cities with data: {known}")
    temp = row["temperature_c"] if unit == "celsius" else round(row["temperature_c"] * 9 / 5 + 32, 1)
    return {
        "city": row["city"],
        "condition": row["condition"],
        "temperature": temp,
        "unit": unit,
        "humidity_percent": row["humidity_percent"],
        "wind_kph": row["wind_kph"],
    }


weather = Tool(
    name="weather",
    description="Current weather in a city.",
    parameters={
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    function=lookup,
    timeout_s=2.0,
)
