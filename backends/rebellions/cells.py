"""Reading one cell of ``rbln-smi -j`` JSON: strings or numbers, ``N/A`` as ``None``.

Shared by the device-row parser (:mod:`.parse`) and the context
(process) parser (:mod:`.processes`).
"""

from __future__ import annotations

from allsmi import units


def text_of(value: object) -> str | None:
    """A non-empty string from a string or integer cell; ``None`` for N/A and other types."""
    if isinstance(value, bool) or units.is_missing(value):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value.strip()
    return None


def npu_key(value: object) -> int | str | None:
    """``npu`` is an int since SDK 2.0 and a string ("0") before; compare them as ints."""
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
