"""The schema boundary's rules for measured numbers: each returns the value as the schema keeps
it, or ``None`` where it is not one (a bool, text, NaN, an infinity, a value out of range).
Unknown is ``None``, never 0 or NaN (:mod:`allsmi.schema` applies them in ``__post_init__``,
:mod:`allsmi.schema.samplecopy` to the fields a copy changes)."""

from __future__ import annotations

import re
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


def whole_setting(value: Any) -> int | None:
    """A configuration file's whole number as an ``int``: a TOML integer, or a float with no
    fractional part (``10.0``); ``None`` for anything else (a fraction, a bool, text, NaN, an
    infinity). The one rule of every setting whose range says *whole*; a huge integer is
    returned as it is (out of every range)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():  # (NaN and the infinities are not)
        return int(value)
    return None


#: What a number given as text (a flag, an environment variable) may be: ASCII decimal digits,
#: a sign, a point and an exponent, with ASCII blanks around it; never Python's other forms
#: (``1_0``, full-width ``５``, ``0x10``, ``inf``, ``nan``). Compiled on first use (``re``'s cache),
#: not when a snapshot imports this module.
_DECIMAL = (r"[ \t\n\r\f\v]*([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
            r"[ \t\n\r\f\v]*")
#: A whole number's digits longer than this are out of every range (never converted whole).
_MAX_DIGITS = 30


def number_in_text(text: str, low: float, high: float, *, whole: bool = False,
                   low_open: bool = False) -> float | int:
    """The number written in ``text`` (a flag's or an environment variable's value), from ``low``
    to ``high`` (``low`` itself left out with ``low_open``), an ``int`` where ``whole`` (a
    decimal with no fractional part, ``10.0``, is whole, as in the file: :func:`whole_setting`);
    ``ValueError`` saying what it takes otherwise. The one parser of every number given as
    text: ASCII decimal forms only (see :data:`_DECIMAL`)."""
    words = f"a whole number from {low:.0f} to {high:.0f}" if whole and not low_open \
        else "a number " + range_text(low, high, not low_open)
    match = re.fullmatch(_DECIMAL, text) if isinstance(text, str) else None
    number: float | int | None = None
    if match is not None:
        written = match.group(1)
        digits = written.lstrip("+-")
        if digits.isdigit():  # a whole number written as one: exact, never through a float
            # (leading zeros count for nothing: 0000...01 is 1, however many there are, and
            # are dropped before int(), which refuses a string of over 4300 digits)
            significant = digits.lstrip("0") or "0"
            negative = written[0] == "-"
            number = (-1 if negative else 1) * int(significant) \
                if len(significant) <= _MAX_DIGITS else (-FINITE if negative else FINITE)
        else:
            number = float(written)  # (finite or an infinity: 1e999 is out of range below)
            if whole and abs(number) <= high:  # (exactly: 1e-999 is no whole number, though
                from decimal import Decimal   # a float makes it 0)
                exact = Decimal(written)
                number = int(exact) if exact == exact.to_integral_value() else None
    if number is None or not (low < number if low_open else low <= number) or number > high:
        raise ValueError(f"expected {words}, got {text!r}")
    return number if whole else float(number) + 0.0  # (-0 is 0)
