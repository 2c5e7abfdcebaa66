"""Reading one cell of a vendor tool's output, and quoting it in a warning.

A cell is a string or number as the tool printed it. :func:`text_of`,
:func:`int_cell` and :func:`index_key` read identities; :func:`whole_cell` reads an
integer-kind value (a PID, an index, a count, a size, a PCIe generation or width) and says
once (:class:`SaidOnce`) what it refused; :class:`CellReader`
reads measurements against the plausible range that :mod:`allsmi.schema.fields`
declares for the schema field they fill (``BY_FIELD``), so a value that is
present but unreadable or impossible becomes ``None`` with a warning naming
the device, the quantity and what the tool printed. :func:`shorten` is the one
way a tool's text is cut to fit a message.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Collection

from allsmi.schema import units
from allsmi.schema.fields import BY_FIELD

#: How much of a tool's text a warning quotes by default.
PREVIEW_CHARS = 80


def shorten(text: object, limit: int = PREVIEW_CHARS) -> str:
    """``text`` on one line (runs of white space as one space), cut to ``limit`` characters
    with an ellipsis; a non-string is shown as its ``repr``."""
    flat = " ".join((text if isinstance(text, str) else repr(text)).split())
    return flat if len(flat) <= limit else flat[:max(1, limit - 1)] + "…"


def text_of(value: object) -> str | None:
    """A non-empty string from a string or integer cell; ``None`` for N/A and other types."""
    if isinstance(value, bool) or units.is_missing(value):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value.strip()
    return None


def index_key(value: object) -> int | str | None:
    """An index cell that is an int in some tool versions and a string ("0") in others,
    as an int where it is one (ASCII digits), so both compare equal; other text as it is.
    A negative number is no index: ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    text = text_of(value)
    if text is None:
        return None
    number = units.to_int(text)
    return text if number is None else number


def int_cell(value: object) -> int | None:
    """A whole number of 0 or more from ``5`` or ``"5"``; ``None`` for anything else (no
    rounding of "5.7", no -1, no digits of other scripts): :func:`allsmi.schema.units.to_int`."""
    return units.to_int(value)


#: All-ones values a vendor tool prints for "no reading" where a field is 32 or 64 bits wide
#: (an unsigned register or counter, or its signed maximum): :data:`allsmi.schema.units.WIDE_SENTINELS`.
WIDE_SENTINELS = units.WIDE_SENTINELS
#: A cell that is one whole number, decimal or ``0x`` hex, with an optional unit after it.
_WHOLE_WITH_UNIT = re.compile(r"^\s*(0[xX][0-9a-fA-F]+|[0-9]+)(?:\.0*)?\s*[A-Za-zµ°%/]*\s*$")


def is_sentinel(raw: object, sentinels: Collection[int] = units.UINT_SENTINELS) -> bool:
    """Whether a cell is an all-ones sentinel among ``sentinels``: the number itself
    (``4294967295``), or a string of it with or without a unit (``"4294967295uW"``,
    ``"0xFFFFFFFF"``, ``"65535 W"``); the number is compared as printed, before any unit
    conversion, since that is the width of the vendor's field."""
    if isinstance(raw, bool):
        return False
    if isinstance(raw, int):
        return raw in sentinels
    if isinstance(raw, float):
        return raw.is_integer() and int(raw) in sentinels
    if isinstance(raw, str):
        match = _WHOLE_WITH_UNIT.match(raw)
        return match is not None and int(match.group(1), 0) in sentinels
    return False


#: PCIe link generations (2.5 GT/s Gen 1 to 128 GT/s Gen 7) and widths a link can train to.
PCIE_GENERATIONS = range(1, 8)
PCIE_WIDTHS = (1, 2, 4, 8, 16, 32)


class SaidOnce:
    """Warnings said once per (device, field, printed value) while a backend is open, so a
    value a tool keeps printing wrong is named when first seen, not every sample. A backend
    makes a new one in ``open()``."""

    def __init__(self) -> None:
        self._said: set[tuple[str, ...]] = set()

    def say(self, warnings: list[str], key: tuple[str, ...], warning: str) -> None:
        """Append ``warning`` to ``warnings`` unless ``key`` was said before."""
        if key not in self._said:
            self._said.add(key)
            warnings.append(warning)


def whole_cell(raw: object, device: str, field: str, warnings: list[str],
               said: SaidOnce | None = None, *, minimum: int = 0, maximum: int | None = None,
               allowed: Collection[int] | None = None, sentinels: bool = True) -> int | None:
    """``raw`` as an integer-kind value (:func:`allsmi.schema.units.to_int`): a whole number from
    ``minimum`` to ``maximum``, and one of ``allowed`` when given. Anything else is ``None``
    (never rounded or clamped), with a warning naming ``device``, ``field`` and what the tool
    printed, said once per those three through ``said`` (every time without one); a spelling
    of "no value" (``N/A``, ``null``) and a 32- or 64-bit all-ones sentinel (``4294967295``,
    :data:`WIDE_SENTINELS`) are ``None`` without one. ``sentinels=False`` keeps the latter
    for a counter that passes through all ones on its way round (a heartbeat)."""
    if sentinels and is_sentinel(raw, WIDE_SENTINELS):
        return None
    value = units.to_int(raw, minimum=minimum, maximum=maximum)
    if value is not None and (allowed is None or value in allowed):
        return value
    if units.is_missing(raw):
        return None
    if allowed is not None:
        legal = "one of " + ", ".join(str(n) for n in allowed)
    elif maximum is not None:
        legal = f"a whole number from {minimum} to {maximum}"
    else:
        legal = f"a whole number of {minimum} or more"
    warning = f"{device}: {field} value {shorten(repr(raw), 60)} is not {legal}; reported as unknown"
    if said is None:
        warnings.append(warning)
    else:
        said.say(warnings, (device, field, repr(raw)), warning)
    return None


class CellReader:
    """Reads one device's cells into ``warnings``, noting values present but unusable.

    ``label`` names the device in every warning. Bounds come from the schema field a value
    fills (``BY_FIELD[schema_field].minimum``/``maximum``); ``minimum``/``maximum`` given
    to a call narrow them, or bound a quantity that fills no schema field.
    """

    def __init__(self, label: str, warnings: list[str]) -> None:
        self.label = label
        self.warnings = warnings

    def _unusable(self, why: str, what: str, raw: object) -> None:
        self.warnings.append(f"{self.label}: {why} {what} {shorten(repr(raw), 60)}; reported as unknown")

    def measure(self, raw: object, parsed: float | None, what: str, schema_field: str | None = None,
                *, minimum: float | None = None, maximum: float | None = None) -> float | None:
        """``parsed`` (the tool's ``raw`` cell, already converted to schema units) when it is
        in range; ``None``, with a warning unless ``raw`` is a spelling of "no value", else.

        A ``raw`` cell that is an all-ones sentinel (:func:`is_sentinel`: ``4294967295uW``,
        ``18446744073709551615``) is ``None`` without a warning, whatever it converts to (4294.97 W
        is in range): 65535 too for a measurement of a schema field other than a byte count
        or a counter (a size of 65535 MiB, or 65535 mJ of energy, is an ordinary one)."""
        wide = schema_field is None or schema_field.endswith(("_bytes", "_joules", "_total"))
        if is_sentinel(raw, WIDE_SENTINELS if wide else units.UINT_SENTINELS):
            return None
        if parsed is None:
            if not units.is_missing(raw):
                self._unusable("unreadable", what, raw)
            return None
        low, high = minimum, maximum
        if schema_field is not None:
            spec = BY_FIELD[schema_field]
            low = spec.minimum if low is None else low if spec.minimum is None else max(low, spec.minimum)
            high = spec.maximum if high is None else high if spec.maximum is None else min(high, spec.maximum)
        if (low is not None and parsed < low) or (high is not None and parsed > high):
            self._unusable("implausible", what, raw)
            return None
        return parsed

    def plausible(self, value: float | None, what: str, schema_field: str | None = None,
                  *, minimum: float | None = None, maximum: float | None = None) -> float | None:
        """An already converted ``value`` checked as :meth:`measure` checks a cell."""
        return self.measure(value, value, what, schema_field, minimum=minimum, maximum=maximum)

    def number(self, raw: object, parse: Callable[[Any], Any], what: str,
               schema_field: str | None = None) -> Any:
        """``parse(raw)`` checked as :meth:`measure` checks it."""
        return self.measure(raw, parse(raw), what, schema_field)

    def size(self, raw: object, what: str, default_unit: str = "b") -> int | None:
        """Bytes from a size cell (a bare number is in ``default_unit``); never negative."""
        parsed = units.parse_size_bytes(raw, default_unit=default_unit)
        checked = self.measure(raw, parsed, what, minimum=0)
        return None if checked is None else int(checked)
