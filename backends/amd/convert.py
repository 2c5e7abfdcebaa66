"""Turning the values ``amdsmi`` returns into the schema's units.

amdsmi's Python layer returns ints, floats or the string ``"N/A"``. It turns
some sentinels into ``"N/A"`` but not all: ``amdsmi_get_power_info`` and
``amdsmi_get_gpu_activity`` only check for ``0xFFFF``, so an unsupported
``UINT32_MAX`` field arrives as ``4294967295``. Every reading passes through
:func:`reading`, which rejects "N/A" and the all-ones sentinels of the field's
C width. Units per call (amdsmi 7.x):

* ``amdsmi_get_power_info``: socket power in W; ``power_limit`` in W, or µW in releases that
  copy hwmon's ``power1_cap`` unconverted (told apart like the power cap).
* ``amdsmi_get_power_cap_info``: microwatts since ROCm 6.1.2, watts before.
* ``amdsmi_get_energy_count``: ticks (``energy_accumulator``; only ``power`` in early 6.x releases);
  ``counter_resolution`` is µJ per tick.
* ``amdsmi_get_gpu_vram_usage``: "MB" that are MiB (the library divides bytes
  by 1024*1024 and truncates); ``amdsmi_get_gpu_memory_usage``/``_total``:
  bytes.
* ``amdsmi_get_temp_metric``: °C (amd-smi prints the raw value as C).
"""

from __future__ import annotations

import math
from typing import Mapping

from allsmi.schema import units
from allsmi.schema.fields import BY_FIELD

U16_MAX = 0xFFFF
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF

#: Sentinels by C field width. The 16-bit one counts for wider power fields
#: too, because the C library pre-fills them with 0xFFFF before reading.
SENTINELS_U32 = frozenset({U16_MAX, U32_MAX})
SENTINELS_U64 = frozenset({U16_MAX, U32_MAX, U64_MAX})
SENTINELS_WIDE_ONLY = frozenset({U32_MAX, U64_MAX})
"""For counters where 65535 is an ordinary value (bytes, MiB, ticks, error counts)."""

#: Socket power keys, in the order amd-smi picks them: MI300 and later fill
#: ``current_socket_power``; MI200, Navi and older fill ``average_socket_power``;
#: ``socket_power`` is the combined field of newer libraries.
SOCKET_POWER_KEYS = ("current_socket_power", "average_socket_power", "socket_power")

_TEMP_MIN = BY_FIELD["temperature_celsius"].minimum
_TEMP_MAX = BY_FIELD["temperature_celsius"].maximum


def reading(value: object, sentinels: frozenset[int] = units.UINT_SENTINELS) -> int | float | None:
    """A number from an amdsmi field, or ``None`` for "N/A", a sentinel or garbage."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if value in sentinels else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        number = units.to_float(value)
        if number is None:
            return None
        if number.is_integer() and int(number) in sentinels:
            return None
        return number
    return None


def whole(value: object, sentinels: frozenset[int] = units.UINT_SENTINELS) -> int | None:
    """A whole number of 0 or more from an amdsmi integer field (an index, a count, bytes), or
    ``None``: "N/A", a sentinel, and what no unsigned field holds (a negative number, a fraction,
    which ``int()`` would truncate, a float or a bool): :func:`allsmi.schema.units.to_int`."""
    number = units.to_int(value)
    return None if number is None or number in sentinels else number


def text(value: object) -> str | None:
    """A clean string, or ``None`` for empty and "N/A"-like values."""
    if not isinstance(value, str) or units.is_missing(value):
        return None
    return value.strip() or None


def socket_power_watts(power_info: Mapping[str, object]) -> tuple[float | None, str | None]:
    """Socket power in W and the key it came from, trying each generation's key."""
    for key in SOCKET_POWER_KEYS:
        watts = reading(power_info.get(key), SENTINELS_U64)
        if watts is not None and watts >= 0:
            return float(watts), key
    return None, None


#: ``amdsmi_get_power_cap_info`` returned W before ROCm 6.1.2 and µW since (its changelog:
#: "now returns values in uW instead of W"). A cap below this many µW (0.1 W) is no GPU's, so a
#: value under it is the older release's watts (a 300 W cap read as 300, not 0.0003 W).
POWER_CAP_WATTS_BELOW = 100_000


def power_cap_watts(cap_info: Mapping[str, object]) -> float | None:
    """The enforced power cap in W from ``amdsmi_get_power_cap_info``: µW (ROCm 6.1.2 and
    later), or W from older releases (:data:`POWER_CAP_WATTS_BELOW`).

    A cap of 0 is what unsupported boards report, not a real limit.
    """
    raw = reading(cap_info.get("power_cap"), SENTINELS_U64)
    if raw is None or raw <= 0:
        return None
    if raw < POWER_CAP_WATTS_BELOW:
        return float(raw)
    return units.micro_to_unit(raw)


def power_limit_watts(power_info: Mapping[str, object]) -> float | None:
    """The fallback power limit in W from ``amdsmi_get_power_info``: W in most releases, but
    the hwmon ``power1_cap`` copied unconverted, µW, in others (ROCm 6.0/6.1 builds, and the
    7.13 header documents µW). A limit of :data:`POWER_CAP_WATTS_BELOW` or more is µW, as for
    the power cap (a 750 W limit read as 750000000, not 750 MW)."""
    raw = reading(power_info.get("power_limit"), SENTINELS_U32)
    if raw is None or raw <= 0:
        return None
    if raw < POWER_CAP_WATTS_BELOW:
        return float(raw)
    return units.micro_to_unit(raw)


def energy_joules(energy: Mapping[str, object]) -> float | None:
    """Energy in J: accumulator ticks × resolution in µJ per tick ÷ 1e6. The ticks are
    ``energy_accumulator``; early amdsmi 6.x releases have only the older name ``power``
    (later 6.x have both, 7.x only the new one)."""
    key = "energy_accumulator" if "energy_accumulator" in energy else "power"
    ticks = reading(energy.get(key), SENTINELS_WIDE_ONLY)
    resolution = reading(energy.get("counter_resolution"), frozenset())
    if ticks is None or resolution is None or ticks < 0 or resolution <= 0:
        return None
    return ticks * resolution / 1e6


def mib_to_bytes(mib: object) -> int | None:
    """Bytes from ``amdsmi_get_gpu_vram_usage``'s "MB" (really MiB) values: whole MiB."""
    value = whole(mib, SENTINELS_WIDE_ONLY)
    return None if value is None else value * units.MIB


def byte_count(value: object) -> int | None:
    """A byte count from a uint64 field (whole, 0 or more), or ``None``."""
    return whole(value, SENTINELS_WIDE_ONLY)


def counter(value: object) -> int | None:
    """An event count (ECC errors) from a uint64 field, or ``None``."""
    return byte_count(value)


def temperature_celsius(value: object) -> float | None:
    """°C from ``amdsmi_get_temp_metric``; ``None`` for sentinels and implausible values.

    The C header once documented millidegrees; a value above 1000 can only be
    that, so it is divided by 1000.
    """
    number = reading(value)
    if number is None:
        return None
    celsius = float(number)
    if abs(celsius) > 1000:
        celsius /= 1000.0
    if (_TEMP_MIN is not None and celsius < _TEMP_MIN) or (_TEMP_MAX is not None and celsius > _TEMP_MAX):
        return None
    return celsius


def clock_mhz(clock_info: Mapping[str, object]) -> float | None:
    """The current clock in MHz from ``amdsmi_get_clock_info``."""
    mhz = reading(clock_info.get("clk"))
    if mhz is None or mhz < 0:
        return None
    return float(mhz)


def activity_percent(value: object) -> float | None:
    """A busy percentage; values above 100 are what amdsmi uses for "unsupported"."""
    return units.parse_percent(reading(value))


def fan_percent(speed: object, speed_max: object) -> float | None:
    """Fan speed as a percentage of its maximum (amdsmi reports both on one scale)."""
    current = reading(speed)
    top = reading(speed_max)
    if current is None or top is None or current < 0 or top <= 0:
        return None
    return units.parse_percent(current * 100.0 / top)


def split_bdf(bdf: str | None) -> tuple[str, int] | None:
    """``("0000:0c:00", 1)`` from ``"0000:0c:00.1"``; ``None`` when malformed.

    On partitioned MI300 parts amdsmi reports each partition with the board's
    domain, bus and device and the partition number as the PCI function.
    """
    if not bdf or "." not in bdf:
        return None
    base, _, function = bdf.rpartition(".")
    if base.count(":") != 2:
        return None
    try:
        return base.lower(), int(function, 16)
    except ValueError:
        return None
