"""Text for people: the one place where ``None`` becomes "N/A"."""

from __future__ import annotations

import math
from typing import Any

NA = "N/A"


def na(value: object, fmt: str = "{}", unit: str = "") -> str:
    """``value`` formatted with ``fmt`` and ``unit``, or "N/A" when unknown."""
    if value is None:
        return NA
    text = fmt.format(value)
    if text.startswith("-") and not text.strip("-0."):  # -0.0, or -0.4 rounded: no sign on zero
        text = text[1:]
    return text + unit


def human_bytes(value: int | float | None) -> str:
    """Binary-prefixed size ("79.6 GiB"), or "N/A"."""
    if value is None:
        return NA
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024.0 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024.0
    return NA  # pragma: no cover


def memory_pair(used: int | None, total: int | None, compact: bool = False) -> str:
    """"45.1 GiB/79.6 GiB" (compact: "45.1/79.6 GiB", in the larger's unit), or "N/A" when
    neither is known."""
    if used is None and total is None:
        return NA
    if not compact:
        return f"{human_bytes(used)}/{human_bytes(total)}"
    largest = max(v for v in (used, total) if v is not None)
    unit = human_bytes(largest).rpartition(" ")[2]
    scale = 1024.0 ** ("B", "KiB", "MiB", "GiB", "TiB").index(unit)
    fmt = "{:.0f}" if unit == "B" else "{:.1f}"
    return f"{na(None if used is None else used / scale, fmt)}/" \
           f"{na(None if total is None else total / scale, fmt)} {unit}"


def percent(value: float | None) -> str:
    """"42%" or "N/A"."""
    return na(value, "{:.0f}", "%")


def watts(value: float | None) -> str:
    """"312 W" or "N/A"."""
    return na(value, "{:.0f}", " W")


def celsius(value: float | None) -> str:
    """"54°C" or "N/A"."""
    return na(value, "{:.0f}", "°C")


def fixed(value: float | None, digits: int) -> str:
    """``value`` with exactly ``digits`` decimals (no sign on a zero: never ``-0.000``); empty
    when unknown. The exports' numbers: the same column has the same precision in every
    output."""
    if value is None:
        return ""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def above_zero(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, as :func:`fixed`; a value above 0 that would print as
    0 is ``<0.01`` (for 2 digits): a figure listed because it is not 0 never reads as 0 (the idle
    hours of ``allsmi idle`` and of the dashboard's idle view)."""
    text = fixed(value, digits)
    if value > 0 and not text.strip("0."):
        return f"<{10.0 ** -digits:.{digits}f}"
    return text


def csv_cell(value: object) -> str:
    """A CSV cell safe to open in a spreadsheet: formula-like text is neutralized.

    Cells starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return are
    prefixed with a single quote (OWASP's advice), except plain numbers such
    as ``-3.5`` which are data, not formulas.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ""  # not a measurement: unknown, as None
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    text = str(value)
    if text and text[0] in "=+-@\t\r":
        try:
            if math.isfinite(float(text)):  # "-inf", "-nan": text a spreadsheet reads as a formula
                return text
        except ValueError:
            pass
        return "'" + text
    return text


#: ``compute_active_source`` as the ``active`` columns abbreviate it (dashboard, snapshot table).
SOURCE_SHORT = {"sm_active": "sm", "gfx_busy": "gfx", "pe_busy": "pe", "core_busy": "core",
                "engine_time": "eng"}
#: The waiting reasons, the ones that cost money first (what a ``waiting`` cell shows first).
REASON_ORDER = ("nothing", "input", "host", "communication", "unknown", "computing")
#: A ``waiting`` cell's word for a reason (the details panel spells it out).
SHORT_REASON = {"communication": "comms"}


def waiting_summary(dev: Any) -> tuple[str, int] | None:
    """(the reason shown, how many holders there are) for a device's ``waiting`` cell: the
    costliest reason among its holders (nothing, input, host, communication, unknown, then
    computing); ``None`` when not classified."""
    waits = dev.waiting
    if not waits:
        return None
    reasons = {w.reason for w in waits}
    return next(r for r in REASON_ORDER if r in reasons), len(waits)


def waiting_words(summary: tuple[str, int]) -> str:
    """A :func:`waiting_summary` in words: ``input``, ``comms +2``."""
    reason, holders = summary
    return SHORT_REASON.get(reason, reason) + (f" +{holders - 1}" if holders > 1 else "")


def money_rank(amount: float | None, currency: str | None,
               hours: float | None) -> tuple[int, str, float, float]:
    """The sort key that ranks holders by money (``allsmi idle``, ``allsmi waste``, the
    dashboard's idle view, the HTML report): most first within each currency, the currencies in
    alphabetical order (amounts in different currencies do not compare: no exchange rate is
    known), every unknown amount after the known ones (never ranked as 0), most ``hours`` first
    among equals. Callers add their own last tie-break (the holder's names)."""
    if amount is None:
        return (1, "", 0.0, -(hours or 0.0))
    return (0, currency or "", -amount, -(hours or 0.0))
