"""Per-process rows that name a device the same output does not list.

A vendor tool's process table names its device by an index, a label or a (card, chip) pair.
A row whose device is not among the devices read this sample (a device that vanished between
two calls, a tool that numbers devices differently in two views) cannot be attached to any
device; it is never dropped in silence: :func:`note_unmatched` says which rows were left out.
"""

from __future__ import annotations

from typing import Collection, Hashable, Iterable

from .cells import shorten


def note_unmatched(named: Iterable[Hashable], listed: Collection[Hashable], warnings: list[str],
                   tool: str, count: "dict[Hashable, int] | None" = None) -> list[Hashable]:
    """Append one warning naming each device key in ``named`` (the process rows' devices) that
    is not in ``listed`` (the devices of this sample); return those keys, sorted by their text.
    ``count`` (key -> rows) puts how many rows each one had in the warning."""
    missing = sorted({key for key in named if key not in listed}, key=repr)
    if missing:
        shown = ", ".join(f"{key!s}" + (f" ({count[key]} row(s))" if count and key in count else "")
                          for key in missing)
        warnings.append(f"{tool}: process rows for device(s) it does not list, not attached to "
                        f"any device: {shorten(shown, 160)}")
    return missing
