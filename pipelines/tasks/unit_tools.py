"""The `convert` tool of `unit_conversion_tool.toml`: unit conversion as a plain Python function."""

from __future__ import annotations

# Each unit: (dimension, factor to the dimension's base unit); temperatures are converted apart.
_UNITS: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "cm": ("length", 0.01),
    "mm": ("length", 0.001),
    "mi": ("length", 1609.344),
    "yd": ("length", 0.9144),
    "ft": ("length", 0.3048),
    "in": ("length", 0.0254),
    "nmi": ("length", 1852.0),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "mg": ("mass", 1e-6),
    "t": ("mass", 1000.0),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "st": ("mass", 6.35029318),
    "l": ("volume", 1.0),
    "ml": ("volume", 0.001),
    "m3": ("volume", 1000.0),
    "gal": ("volume", 3.785411784),
    "qt": ("volume", 0.946352946),
    "pt": ("volume", 0.473176473),
    "cup": ("volume", 0.2365882365),
    "floz": ("volume", 0.0295735295625),
    "tbsp": ("volume", 0.01478676478125),
    "tsp": ("volume", 0.00492892159375),
    "m/s": ("speed", 1.0),
    "km/h": ("speed", 1 / 3.6),
    "mph": ("speed", 0.44704),
    "kn": ("speed", 0.514444),
    "ft/s": ("speed", 0.3048),
    "s": ("time", 1.0),
    "ms": ("time", 0.001),
    "min": ("time", 60.0),
    "h": ("time", 3600.0),
    "day": ("time", 86400.0),
    "week": ("time", 604800.0),
    "degC": ("temperature", 1.0),
    "degF": ("temperature", 1.0),
    "K": ("temperature", 1.0),
}
_ALIASES = {
    "meter": "m",
    "metre": "m",
    "kilometer": "km",
    "kilometre": "km",
    "centimeter": "cm",
    "centimetre": "cm",
    "millimeter": "mm",
    "millimetre": "mm",
    "mile": "mi",
    "yard": "yd",
    "foot": "ft",
    "feet": "ft",
    "inch": "in",
    "inches": "in",
    "nautical mile": "nmi",
    "kilogram": "kg",
    "kilo": "kg",
    "gram": "g",
    "milligram": "mg",
    "tonne": "t",
    "pound": "lb",
    "lbs": "lb",
    "ounce": "oz",
    "stone": "st",
    "liter": "l",
    "litre": "l",
    "milliliter": "ml",
    "millilitre": "ml",
    "gallon": "gal",
    "quart": "qt",
    "pint": "pt",
    "fl oz": "floz",
    "fluid ounce": "floz",
    "tablespoon": "tbsp",
    "teaspoon": "tsp",
    "kph": "km/h",
    "kmh": "km/h",
    "miles per hour": "mph",
    "knot": "kn",
    "knots": "kn",
    "second": "s",
    "sec": "s",
    "millisecond": "ms",
    "minute": "min",
    "hour": "h",
    "hr": "h",
    "days": "day",
    "weeks": "week",
    "c": "degC",
    "°c": "degC",
    "celsius": "degC",
    "f": "degF",
    "°f": "degF",
    "fahrenheit": "degF",
    "k": "K",
    "kelvin": "K",
}
_LOWER = {unit.lower(): unit for unit in _UNITS}


def _unit(name: str) -> str:
    key = name.strip().lower().rstrip(".")
    for candidate in (key, key.removesuffix("s"), key.removesuffix("es")):
        if candidate in _LOWER:
            return _LOWER[candidate]
        if candidate in _ALIASES:
            return _ALIASES[candidate]
    raise ValueError(f"unknown unit {name!r}; known units: {', '.join(_UNITS)}")


def _to_kelvin(value: float, unit: str) -> float:
    return {"K": value, "degC": value + 273.15, "degF": (value - 32) * 5 / 9 + 273.15}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"K": value, "degC": value - 273.15, "degF": (value - 273.15) * 9 / 5 + 32}[unit]


def convert(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a value from one unit to another, e.g. 5 mi to km.

    Args:
        value: The quantity to convert.
        from_unit: The unit of `value`, e.g. 'mi', 'kg', 'degF'.
        to_unit: The unit to convert to, e.g. 'km', 'lb', 'degC'.
    """
    source, target = _unit(from_unit), _unit(to_unit)
    (dimension, factor), (target_dimension, target_factor) = _UNITS[source], _UNITS[target]
    if dimension != target_dimension:
        raise ValueError(f"cannot convert {dimension} ({source}) to {target_dimension} ({target})")
    if dimension == "temperature":
        result = _from_kelvin(_to_kelvin(value, source), target)
    else:
        result = value * factor / target_factor
    return f"{value:g} {source} = {result:.6g} {target}"
