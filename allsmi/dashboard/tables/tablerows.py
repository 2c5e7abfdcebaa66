"""The device table's lines: cells rendered to segments once, lines joined from them.

Each device's :class:`Row` keeps, per cell, the change key it was drawn from
and its segments, so a refresh re-renders only the cells whose value changed;
a line off the cursor is kept whole (each cell styled once) until a cell, the
base style or the width changes. :class:`~allsmi.dashboard.tables.device_table.DeviceTable`
is the widget around them.
"""

from __future__ import annotations

from typing import Any, Hashable

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from allsmi.dashboard.tables.columns import Column
from allsmi.dashboard.views.render import safe_text

#: Spaces on each side of a cell (as DataTable's ``cell_padding=1``).
PAD = 1


class Row:
    """One device's line: the change key and rendered segments of each cell, the joined strip,
    and the line as last drawn off the cursor (each cell styled once, not again for each
    repaint of the line: only the cells whose value changed are styled again)."""

    __slots__ = ("keys", "cells", "strip", "styled", "styled_with", "line")

    def __init__(self, size: int) -> None:
        self.keys: list[Hashable] = [UNSET] * size
        self.cells: list[list[Segment]] = [[] for _ in range(size)]
        self.strip: Strip | None = None
        self.styled: list[list[Segment] | None] = [None] * size
        """Each cell's segments with the table's base style applied (``None``: not yet)."""
        self.styled_with: Style | None = None
        self.line: Strip | None = None
        """The whole line as drawn off the cursor, at the table's width (``None``: draw it)."""


UNSET: Any = object()


def render_cell(column: Column, value: Any, console: Console) -> list[Segment]:
    """A cell's segments: ``value`` made safe, cut or padded to the column's width, with
    :data:`PAD` spaces on each side."""
    return render_width(value, column.width, console)


def render_width(value: Any, width: int, console: Console) -> list[Segment]:
    """:func:`render_cell` for a column ``width`` cells wide."""
    text = safe_text(value)
    if "\n" in text.plain:  # a cell is one line: a break from the data is a space (as ESC is)
        text.plain = text.plain.replace("\n", " ")
    if text.cell_len > width:  # every cut is marked (a wide character may leave one cell)
        text.truncate(width, overflow="ellipsis")
    room = width - text.cell_len
    if room > 0:
        if text.justify == "right":
            text.pad_left(room)
        else:
            text.pad_right(room)
    pad = Segment(" " * PAD)
    return [pad, *text.render(console, end=""), pad]


def plain_line(row: Row, base: Style, width: int, table_width: int) -> Strip:
    """A row off the cursor, not scrolled sideways: its styled cells joined, padded to
    ``width``; kept until a cell, the base style or the width changes."""
    if row.styled_with != base:
        row.styled_with, row.line = base, None
        row.styled = [None] * len(row.cells)
    line = row.line
    if line is None or line.cell_length != width:
        segments: list[Segment] = []
        styled = row.styled
        for i, cell in enumerate(row.cells):
            done = styled[i]
            if done is None:
                done = styled[i] = list(Segment.apply_style(cell, base))
            segments.extend(done)
        if width > table_width:
            segments.append(Segment(" " * (width - table_width), base))
        line = row.line = Strip(segments, width)
    return line
