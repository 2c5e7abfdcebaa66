"""The schema boundary's rules for measured numbers: each returns the value as the schema keeps
it, or ``None`` where it is not one (a bool, text, NaN, an infinity, a value out of range).
Unknown is ``None``, never 0 or NaN (:mod:`allsmi.schema` applies them in ``__post_init__``,
:mod:`allsmi.samplecopy` to the fields a copy changes)."""

from __future__ import annotations

import sys
from typing import Any, Callable

_INF = float("inf")


def plain_number(value: Any) -> int | float | None:
    """``value`` as a Python ``int`` or ``float``: as it is, or converted where it is a real number
    of another type (numpy's ``float32`` and ``int64``, a ``Fraction``: registered with
    :mod:`numbers`, as a plug-in backend may give them); ``None`` for anything else (a bool,
    text, ``None``)."""
    if value is None or isinstance(value, bool):  # (None: an unknown value, the common other)
        return None
    if isinstance(value, (int, float)):
        return value
    import numbers  # (only for the rare value that is neither: a snapshot never imports it)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def percent_or_none(value: Any) -> float | None:
    """A percentage, 0 to 100."""
    if type(value) is float and 0.0 <= value <= 100.0:  # (nearly always: as it is)
        return value
    value = plain_number(value)
    if value is None:
        return None
    return float(value) if 0.0 <= value <= 100.0 else None  # NaN fails both comparisons


def rate_or_none(value: Any) -> float | None:
    """A finite figure that is never negative (a rate, watts, joules, MHz)."""
    if type(value) is float and 0.0 <= value < _INF:  # (nearly always: as it is)
        return value
    value = plain_number(value)
    if value is None:
        return None
    return float(value) if 0.0 <= value < _INF else None


#: The largest byte count the schema keeps: what a signed 64-bit integer holds (the ledger's
#: SQLite column, a Prometheus client's counter; no device has 8 EiB).
MAX_BYTES = 2**63 - 1


def bytes_or_none(value: Any) -> int | None:
    """A byte count: a whole number from 0 to :data:`MAX_BYTES` (a finite float is made whole)."""
    if type(value) is int and 0 <= value <= MAX_BYTES:  # (nearly always: as it is)
        return value
    value = plain_number(value)
    if value is None:
        return None
    return int(value) if 0 <= value <= MAX_BYTES else None


#: The upper end of a range with none: any finite figure (an infinity is out of it).
FINITE = sys.float_info.max


def in_range(value: Any, low: float, high: float) -> float | None:
    """A figure from ``low`` to ``high``, both included (``high`` :data:`FINITE`: any finite
    figure at least ``low``)."""
    if type(value) is float and low <= value <= high:  # (nearly always: as it is)
        return value
    if value is None:  # (unknown: the next most common)
        return None
    value = plain_number(value)
    if value is None:
        return None
    return float(value) if low <= value <= high else None  # NaN fails both comparisons


def ranged(low: float, high: float) -> Callable[[Any], float | None]:
    """:func:`in_range` from ``low`` to ``high``, as a function of the value alone."""
    def clean(value: Any) -> float | None:
        if type(value) is float and low <= value <= high:
            return value
        if value is None:
            return None
        return in_range(value, low, high)
    return clean


#: The largest device index the schema keeps (as a parsed snapshot does).
MAX_INDEX = 2**31


def index_or_none(value: Any) -> int | None:
    """A device index: a whole number, 0 to :data:`MAX_INDEX` (a bool or text is none)."""
    if type(value) is int and 0 <= value <= MAX_INDEX:
        return value
    import numbers  # (only for the rare index that is not an int: numpy's int64)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and 0 <= int(value) <= MAX_INDEX:
        return int(value)
    return None


def share_or_none(value: Any) -> float | None:
    """A fraction of a device, in (0, 1] (a partition's share)."""
    value = plain_number(value)
    if value is None:
        return None
    return float(value) if 0.0 < value <= 1.0 else None


def setting_number(value: Any) -> float | None:
    """A configuration file's number as a ``float`` for its range check; ``None`` for what is no
    number: a bool, text, a table, NaN, an infinity. TOML integers have no bound: one too large
    for a float (where ``math.isfinite`` and ``float`` raise ``OverflowError``) is :data:`FINITE`
    of its sign, out of every setting's range, so it is refused by that range with its key,
    never with a traceback. Every check of a numeric setting starts here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return FINITE if value > 0 else -FINITE
    return number if number - number == 0.0 else None  # NaN and the infinities give NaN


def range_text(minimum: float, maximum: float | None, allow_zero: bool = True) -> str:
    """A setting's range in words, both ends named: ``from 0.05 to 3600``, ``above 0, at most
    36500`` (``allow_zero`` false with a minimum of 0), ``from 0`` where there is no upper end."""
    low = "above 0" if minimum == 0 and not allow_zero else f"from {minimum:g}"
    if maximum is None:
        return low
    return f"{low}, at most {maximum:g}" if low == "above 0" else f"{low} to {maximum:g}"
