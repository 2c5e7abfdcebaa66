"""hl-smi's ``-Q ... -f csv,noheader,nounits`` output: fields, rows and frames.

Pure parsing, no processes: :mod:`allsmi.backends.gaudi` runs the tool and
feeds the lines in. Kept separate so the framing rules can be tested with
explicit clocks.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from allsmi.schema import units
from allsmi.backends._common.cells import shorten

#: Fields every documented hl-smi version is expected to accept (an hl-smi that
#: rejects one of them, ``driver_version`` say, still works without it).
CORE_FIELDS: tuple[str, ...] = (
    "index", "uuid", "name", "bus_id", "driver_version", "utilization.aip",
    "memory.total", "memory.used", "temperature.aip", "power.draw",
)

#: Fields only some hl-smi versions accept (``power.max`` is undocumented but
#: printed by SW 1.22 on Gaudi 3; the clocks and ECC fields are missing from the
#: older docs pages). Each is dropped on its own when the tool rejects it.
OPTIONAL_FIELDS: tuple[str, ...] = (
    "power.max", "clocks.current.soc", "clocks.max.soc", "module_id", "serial",
    "ecc.errors.uncorrected.aggregate.total", "ecc.errors.corrected.aggregate.total",
)

ALL_FIELDS: tuple[str, ...] = CORE_FIELDS + OPTIONAL_FIELDS

#: Fields that identify a device; a row needs at least one of them (never dropped).
KEY_FIELDS = ("index", "bus_id", "uuid")


def named_fields(message: str, candidates: Sequence[str]) -> list[str]:
    """The candidates that ``message`` names as whole words (``power.max`` but not ``power.max2``)."""
    found = []
    for name in candidates:
        if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", message):
            found.append(name)
    return found


@dataclass(frozen=True)
class Row:
    """One device's cells from one output line, keyed by field name; ``None`` for N/A."""

    cells: Mapping[str, str | None]
    key: str
    """What identifies the device within one frame: its index, else bus id, else uuid."""

    def get(self, name: str) -> str | None:
        return self.cells.get(name)


def parse_line(line: str, fields: Sequence[str]) -> Row | str:
    """A :class:`Row`, or a short reason why ``line`` is not one.

    hl-smi separates cells with ``", "``; cells are stripped, and every
    spelling of "missing" (``N/A``, ``[N/A]``, ``[Not Supported]``...) becomes None.
    """
    text = line.strip()
    if not text:
        return "empty line"
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != len(fields):
        return f"{len(parts)} cells where {len(fields)} were asked for"
    cells = {name: (None if units.is_missing(value) else value)
             for name, value in zip(fields, parts)}
    index = cells.get("index")
    if index is not None and not re.fullmatch(r"[0-9]+", index):
        return f"index {index!r} is not a number"
    for name in KEY_FIELDS:
        if cells.get(name):
            return Row(cells=cells, key=f"{name}:{cells[name]}")
    return "no index, bus id or uuid"


def parse_output(text: str, fields: Sequence[str], *,
                 last_line_complete: bool = True) -> tuple[list[Row], list[str]]:
    """Rows of one complete run, and a warning for each line that is not a row.

    With ``last_line_complete=False`` (output cut by a size cap) a final line
    without a newline is dropped rather than trusted.
    """
    lines = text.split("\n")
    tail_cut = not last_line_complete and not text.endswith("\n")
    rows: list[Row] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if tail_cut and number == len(lines):
            problems.append(f"line {number}: cut off by the output cap; skipped")
            continue
        parsed = parse_line(line, fields)
        if isinstance(parsed, Row):
            rows.append(parsed)
        else:
            problems.append(f"line {number}: {parsed}: {shorten(line)!r}; skipped")
    return rows, problems


@dataclass(frozen=True)
class Frame:
    """The rows of one hl-smi cycle. Never holds rows of two cycles."""

    rows: tuple[Row, ...]
    closed_at: float
    """Monotonic time the frame was closed (its data are this old, or a little older)."""
    complete: bool
    """True when every device expected from earlier frames is in it."""
    generation: int = 0
    """Which child produced it (0 for a one-shot run)."""


@dataclass
class FrameAssembler:
    """Cuts the row stream of ``hl-smi -l`` into frames, one per cycle.

    hl-smi prints one row per device per cycle, each device once. A frame
    closes when it holds every expected device (the devices of the previous
    frame), when a device repeats (so its row opens the next cycle), or when
    no row came for ``idle_close`` seconds (the cycle is over, with some row
    missing or garbled). :meth:`discard_partial` drops an unfinished frame when
    its child dies, so a restart never completes a frame begun by the old
    child. Not thread-safe; the caller holds a lock.
    """

    idle_close: float
    clock: Callable[[], float] = time.monotonic
    expected: frozenset[str] = frozenset()
    latest: Frame | None = None
    frames: int = 0
    _rows: list[Row] = field(default_factory=list)
    _keys: set[str] = field(default_factory=set)
    _last_row_at: float = 0.0
    _generation: int = 0

    def add(self, row: Row, generation: int = 0) -> None:
        """Feed one parsed row from the child ``generation``."""
        now = self.clock()
        if self._rows and (generation != self._generation
                           or now - self._last_row_at > self.idle_close
                           or row.key in self._keys):
            self._close(now)
        if generation != self._generation:
            self._rows.clear()
            self._keys.clear()
        self._generation = generation
        self._rows.append(row)
        self._keys.add(row.key)
        self._last_row_at = now
        if self.expected and self._keys >= self.expected:
            self._close(now)

    def poll(self) -> Frame | None:
        """Close an open frame whose writer has gone quiet; return the latest frame."""
        now = self.clock()
        if self._rows and now - self._last_row_at > self.idle_close:
            self._close(now)
        return self.latest

    def discard_partial(self) -> int:
        """Drop the unfinished frame (its child died); return how many rows were dropped."""
        dropped = len(self._rows)
        self._rows.clear()
        self._keys.clear()
        return dropped

    def _close(self, now: float) -> None:
        keys = frozenset(self._keys)
        complete = keys >= self.expected
        self.latest = Frame(rows=tuple(self._rows), closed_at=now, complete=complete,
                            generation=self._generation)
        self.frames += 1
        # A device missing from this frame stays expected, so later frames
        # without it are marked incomplete (and it is reported degraded)
        # instead of silently shrinking the device list.
        self.expected = keys if complete or not self.expected else self.expected | keys
        self._rows.clear()
        self._keys.clear()
