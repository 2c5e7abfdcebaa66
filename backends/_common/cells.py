"""Reading one cell of a vendor tool's output, and quoting it in a warning.

A cell is a string or number as the tool printed it. :func:`text_of`,
:func:`int_cell` and :func:`index_key` read identities; :class:`CellReader`
reads measurements against the plausible range that :mod:`allsmi.fields`
declares for the schema field they fill (``BY_FIELD``), so a value that is
present but unreadable or impossible becomes ``None`` with a warning naming
the device, the quantity and what the tool printed. :func:`shorten` is the one
way a tool's text is cut to fit a message.
"""

from __future__ import annotations

from typing import Any, Callable

from allsmi import units
from allsmi.fields import BY_FIELD

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
    as an int where it is one, so both compare equal; other text as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = text_of(value)
    if text is None:
        return None
    return int(text) if text.isdecimal() else text


def int_cell(value: object) -> int | None:
    """An integer from ``5`` or ``"5"``; ``None`` for anything else (no rounding of "5.7")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = text_of(value)
    return int(text) if text is not None and text.isdecimal() else None


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
        in range; ``None``, with a warning unless ``raw`` is a spelling of "no value", else."""
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
