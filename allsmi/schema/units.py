"""Unit conversions and parsers for the strings vendor tools print.

Every backend converts to the schema's units (bytes, watts, joules, celsius,
percent, MHz) with these helpers, so a unit bug is fixed in one place.
Parsers return ``None`` for missing or malformed input ("N/A", "", "-",
sentinels) rather than guessing.
"""

from __future__ import annotations

import math
import re

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_MISSING = {"", "n/a", "[n/a]", "na", "none", "null", "-", "--", "not supported",
            "[not supported]", "unknown", "[unknown]", "nan"}


def is_missing(text: object) -> bool:
    """True for the many spellings vendors use for "no value"."""
    if text is None:
        return True
    if isinstance(text, float) and math.isnan(text):
        return True
    return isinstance(text, str) and text.strip().lower() in _MISSING


def to_float(value: object) -> float | None:
    """A finite float from a number or numeric string, else ``None``."""
    if is_missing(value) or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def to_int(value: object, *, minimum: int | None = 0, maximum: int | None = None) -> int | None:
    """A whole number from an int or a string of ASCII digits (spaces around it allowed), within
    ``minimum``..``maximum`` (by default 0 or more); ``None`` for anything else.

    For the integer-kind values tools print (a PID, an index, a count, a size in bytes, a PCIe
    generation or width), where a value that cannot be right must not pass as one: a fraction
    (``"3.7"``, even ``"3.0"``), an exponent (``"1e3"``), a float, a bool, a ``+`` sign,
    underscores, digits of other scripts (``"٣"``, ``"３"``, which ``int()``, ``str.isdecimal``
    and ``\\d`` all take) and a number out of range are ``None``: never rounded, truncated or
    clamped. A ``-`` sign is read only where ``minimum`` admits negative numbers (``None`` or
    below 0).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        signed = minimum is None or minimum < 0
        digits = text[1:] if signed and text.startswith("-") else text
        # on ASCII text, isdigit() is exactly [0-9]+ (no regex: this module is imported on the
        # NVML fast path, which compiles none)
        if not (digits.isascii() and digits.isdigit()):
            return None
        number = int(text)
    else:
        return None
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        return None
    return number


_NUM_UNIT = r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-zµ°%/]*)\s*$"
#: :data:`_NUM_UNIT` compiled on the first text to split: the NVML backend, which a one-shot
#: snapshot imports this module for, hands over numbers only (about 1 M instructions saved).
_num_unit: "re.Pattern[str] | None" = None

# Sub-units are divisors (41200000 / 1e6 is exactly 41.2; 41200000 * 1e-6 is not).
_POWER_SCALE = {"w": 1.0, "mw": -1e3, "uw": -1e6, "µw": -1e6, "kw": 1e3, "": 1.0}
_ENERGY_SCALE = {"j": 1.0, "mj": -1e3, "uj": -1e6, "µj": -1e6, "kj": 1e3, "kwh": 3.6e6,
                 "wh": 3600.0, "": 1.0}
_FREQ_SCALE = {"mhz": 1.0, "ghz": 1e3, "khz": -1e3, "hz": -1e6, "": 1.0}


def _scaled(number: float, scale: float) -> float | None:
    """Multiply by a positive scale, divide by a negative one (an exact divisor); ``None`` where
    the product is past the largest float (``"1e308 kW"``): no reading, never an infinity."""
    value = number / -scale if scale < 0 else number * scale
    return value if math.isfinite(value) else None
_TEMP_UNITS = {"c", "°c", "", "degc", "celsius"}
_SIZE_SCALE = {
    "b": 1, "": 1,
    "k": KIB, "kb": KIB, "kib": KIB,
    "m": MIB, "mb": MIB, "mib": MIB,
    "g": GIB, "gb": GIB, "gib": GIB,
    "t": TIB, "tb": TIB, "tib": TIB,
}


def _split(value: object) -> tuple[float, str] | None:
    if is_missing(value) or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return (float(value), "") if math.isfinite(float(value)) else None
    if not isinstance(value, str):
        return None
    global _num_unit
    if _num_unit is None:
        _num_unit = re.compile(_NUM_UNIT)
    match = _num_unit.match(value)
    if not match:
        return None
    number = float(match.group(1))  # "1e999" is a float infinity: no reading, as float("inf") is
    return (number, match.group(2).lower()) if math.isfinite(number) else None


def parse_power_watts(value: object, default_unit: str = "w") -> float | None:
    """Watts from ``"17521800uW"``, ``"45.2 W"``, ``"350mW"`` or a bare number in ``default_unit``."""
    parts = _split(value)
    if parts is None:
        return None
    number, unit = parts
    scale = _POWER_SCALE.get(unit or default_unit.lower())
    return None if scale is None else _scaled(number, scale)


def parse_energy_joules(value: object, default_unit: str = "j") -> float | None:
    """Joules from ``"1200 J"``, ``"5mJ"`` or a bare number in ``default_unit``."""
    parts = _split(value)
    if parts is None:
        return None
    number, unit = parts
    scale = _ENERGY_SCALE.get(unit or default_unit.lower())
    return None if scale is None else _scaled(number, scale)


def parse_temperature_celsius(value: object) -> float | None:
    """Celsius from ``"31C"``, ``"45 °C"`` or a bare number."""
    parts = _split(value)
    if parts is None:
        return None
    number, unit = parts
    return number if unit in _TEMP_UNITS else None


def parse_clock_mhz(value: object, default_unit: str = "mhz") -> float | None:
    """MHz from ``"1980 MHz"``, ``"1.98GHz"`` or a bare number in ``default_unit``."""
    parts = _split(value)
    if parts is None:
        return None
    number, unit = parts
    scale = _FREQ_SCALE.get(unit or default_unit.lower())
    return None if scale is None else _scaled(number, scale)


def _whole(number: float) -> int | None:
    """``number`` rounded to a whole number; ``None`` for one past the largest float (``"1e308
    GiB"``), which ``int()`` refuses with an ``OverflowError`` that would fail the whole sample."""
    return int(round(number)) if math.isfinite(number) else None


def parse_size_bytes(value: object, default_unit: str = "b") -> int | None:
    """Bytes from ``"1.5GiB"``, ``"512 MB"``, ``"1048576"`` or a bare number in ``default_unit``.

    Binary prefixes are assumed for ``K``/``M``/``G`` without ``i``, as every
    accelerator tool in scope uses them for memory.
    """
    parts = _split(value)
    if parts is None:
        return None
    number, unit = parts
    scale = _SIZE_SCALE.get(unit or default_unit.lower())
    return None if scale is None else _whole(number * scale)


def parse_percent(value: object) -> float | None:
    """Percent from ``"37 %"``, ``"37%"`` or a number; ``None`` outside 0..100 (garbage)."""
    parts = _split(value)
    if parts is None:
        return None
    number, unit = parts
    if unit not in ("", "%"):
        return None
    return number if 0.0 <= number <= 100.0 else None


def mib_to_bytes(value: object) -> int | None:
    """Bytes from a MiB count (number or numeric string)."""
    number = to_float(value)
    return None if number is None else _whole(number * MIB)


def milli_to_unit(value: object) -> float | None:
    """Divide by 1000 (mW to W, mJ to J), passing ``None`` through."""
    number = to_float(value)
    return None if number is None else number / 1000.0


def micro_to_unit(value: object) -> float | None:
    """Divide by 1e6 (uW to W, uJ to J), passing ``None`` through."""
    number = to_float(value)
    return None if number is None else number / 1e6


#: Sentinels that vendor libraries return for "not available".
UINT_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFF, 0x7FFFFFFFFFFFFFFF})
#: Those of a 32- or 64-bit field: a byte, MiB or event count may be 65535, so the 16-bit one
#: is not among them.
WIDE_SENTINELS = UINT_SENTINELS - {0xFFFF}


def reject_sentinel(value: object) -> object:
    """``None`` for an all-ones integer sentinel, else the value unchanged."""
    if isinstance(value, int) and not isinstance(value, bool) and value in UINT_SENTINELS:
        return None
    return value
