"""Unit conversion between units of the same dimension (length, mass, volume, speed, time,
data, temperature). Temperature is affine, everything else a factor to the dimension's base."""

from __future__ import annotations

from typing import Any

from agenttrace import Tool, ToolError

# unit -> (dimension, factor to the base unit of that dimension)
_FACTORS: dict[str, tuple[str, float]] = {
    # length, base metre
    "mm": ("length", 1e-3), "cm": ("length", 1e-2), "m": ("length", 1.0), "km": ("length", 1e3),
    "in": ("length", 0.0254), "ft": ("length", 0.3048), "yd": ("length", 0.9144), "mi": ("length", 1609.344),
    # mass, base kilogram
    "mg": ("mass", 1e-6), "g": ("mass", 1e-3), "kg": ("mass", 1.0), "t": ("mass", 1e3),
    "oz": ("mass", 0.028349523125), "lb": ("mass", 0.45359237),
    # volume, base litre
    "ml": ("volume", 1e-3), "l": ("volume", 1.0), "cup": ("volume", 0.2365882365),
    "gal": ("volume", 3.785411784), "floz": ("volume", 0.0295735295625),
    # speed, base metre per second
    "m/s": ("speed", 1.0), "km/h": ("speed", 1 / 3.6), "mph": ("speed", 0.44704), "kn": ("speed", 0.514444),
    # time, base second
    "s": ("time", 1.0), "min": ("time", 60.0), "h": ("time", 3600.0), "day": ("time", 86400.0),
    # data, base byte
    "B": ("data", 1.0), "KB": ("data", 1e3), "MB": ("data", 1e6), "GB": ("data", 1e9),
    "KiB": ("data", 1024.0), "MiB": ("data", 1024.0**2), "GiB": ("data", 1024.0**3),
}
_TEMPERATURE = ("C", "F", "K")
UNITS = sorted(_FACTORS) + list(_TEMPERATURE)


def _to_kelvin(value: float, unit: str) -> float:
    return {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"C": value - 273.15, "F": (value - 273.15) * 9 / 5 + 32, "K": value}[unit]


def convert(value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
    if from_unit in _TEMPERATURE or to_unit in _TEMPERATURE:
        if not (from_unit in _TEMPERATURE and to_unit in _TEMPERATURE):
            raise ToolError(f"cannot convert {from_unit} to {to_unit}: only C, F and K convert to each other")
        if _to_kelvin(value, from_unit) < 0:
            raise ToolError(f"{value} {from_unit} is below absolute zero")
        result = _from_kelvin(_to_kelvin(value, from_unit), to_unit)
    else:
        (dim_from, f_from), (dim_to, f_to) = _FACTORS[from_unit], _FACTORS[to_unit]
        if dim_from != dim_to:
            raise ToolError(f"cannot convert {from_unit} ({dim_from}) to {to_unit} ({dim_to})")
        result = value * f_from / f_to
    return {"value": value, "from_unit": from_unit, "to_unit": to_unit, "result": round(result, 6)}


unit_converter = Tool(
    name="convert_units",
    description="Convert between units such as km, m, mi, ft, kg, lb, C, F, l, gal, km/h, mph, h, min, MB, GiB.",
    parameters={
        "type": "object",
        "properties": {
            "value": {"type": "number"},
            "from_unit": {"type": "string", "enum": UNITS},
            "to_unit": {"type": "string", "enum": UNITS},
        },
        "required": ["value", "from_unit", "to_unit"],
        "additionalProperties": False,
    },
    function=convert,
    timeout_s=2.0,
)
