"""The device table: one line per device, drawn line by line, only where something changed.

A line-based widget (Textual's ``ScrollView`` with ``render_line``), not a
``DataTable``: a ``DataTable`` re-renders every visible row whenever one cell
changes. Here each row keeps one rendered segment list per cell and one
:class:`~textual.strip.Strip` for the whole row. A refresh computes the change
keys of the rows on screen (:mod:`allsmi.dashboard.tables.columns`), re-renders only
the cells whose key changed and asks Textual to repaint only those lines. Rows
off screen are only noted; they are brought up to date when they scroll into
view, so a refresh costs the same with 30 or 3000 devices. A new order (sort,
filter) repaints the visible lines once. Every cell passes through
:func:`~allsmi.dashboard.views.render.safe_text` (no markup, no control characters).
"""

from __future__ import annotations

from typing import Any, ClassVar, Hashable, Sequence

from rich.text import Text
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip

from allsmi.dashboard.tables.columns import (Column, RowContext, RowText, columns_for,  # noqa: F401
                                             parent_names)
from allsmi.dashboard.state.model import DeviceRef
from allsmi.dashboard.views.render import safe_text
from allsmi.dashboard.tables.linetable import LineTable, table_css
from allsmi.dashboard.tables.tablerows import PAD, UNSET, Row, render_cell

# The columns and the panels' table live in their own modules; importers find them here too.
__all__ = ["Column", "DeviceTable", "RowContext", "RowText", "columns_for",
           "parent_names"]

class DeviceTable(LineTable):
    """The node view's table of devices (header line fixed, rows scrolling beneath it)."""

    COMPONENT_PREFIX = "device-table"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"device-table--header", "device-table--cursor"}
    DEFAULT_CSS = table_css("DeviceTable", "device-table", extra="height: 1fr;")

    class RowHighlighted(Message):
        """The cursor moved to another device (keys, mouse, :meth:`move_cursor`)."""

        def __init__(self, table: "DeviceTable", row_key: str) -> None:
            super().__init__()
            self.table = table
            self.row_key = row_key

        @property
        def control(self) -> "DeviceTable":
            return self.table

    class HeaderSelected(Message):
        """A column header was clicked."""

        def __init__(self, table: "DeviceTable", column_id: str) -> None:
            super().__init__()
            self.table = table
            self.column_id = column_id

        @property
        def control(self) -> "DeviceTable":
            return self.table

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec: list[Column] = []
        self._rows: dict[str, Row] = {}
        self._position: dict[str, int] = {}
        self._pending: dict[str, DeviceRef] = {}
        self._refs: dict[str, DeviceRef] = {}
        self._ctx: RowContext | None = None
        self._header: Strip | None = None
        self._cursor_key: str | None = None
        self._announced: str | None = None
        self.cell_updates = 0
        """Cells redrawn because their value changed (first drawings not counted; tests, benchmark)."""

    # -- the data side -------------------------------------------------------------------
    def configure(self, columns: Sequence[Column]) -> bool:
        """Use ``columns``; forgets every rendered cell only when the set of columns changed."""
        if [(c.id, c.width) for c in columns] == [(c.id, c.width) for c in self.spec]:
            self.spec = list(columns)  # same layout; render functions may have new widths baked in
            return False
        self.spec = list(columns)
        self._table_width = sum(c.width + 2 * PAD for c in self.spec)
        self._header = None
        self._rows = {key: Row(len(self.spec)) for key in self._order}
        self._pending = dict(self._refs)  # drawn again from the devices last shown
        self._resize_virtual()
        self.refresh()
        return True

    def invalidate(self) -> None:
        """Forget every rendered cell so the next :meth:`show` redraws them all (theme change)."""
        self._rows = {key: Row(len(self.spec)) for key in self._order}
        self._pending = dict(self._refs)
        self._header = None
        self.refresh()

    def show(self, refs: Sequence[DeviceRef], ctx: RowContext, selected: str | None) -> None:
        """Show ``refs`` in this order; repaint only lines whose text changed.

        The cursor stays on its device wherever the order puts it; ``selected``
        places it when the table has none yet (or its device is gone), else the first row.
        """
        self._ctx = ctx
        order = [r.key for r in refs]
        reordered = order != self._order
        if reordered:
            wanted = set(order)
            for gone in [k for k in self._rows if k not in wanted]:
                del self._rows[gone]
                self._pending.pop(gone, None)
            self._order = order
            self._position = {key: i for i, key in enumerate(order)}
            self._resize_virtual()
        size = len(self.spec)
        for ref in refs:
            if ref.key not in self._rows:
                self._rows[ref.key] = Row(size)
        self._refs = {ref.key: ref for ref in refs}
        self._pending.update(self._refs)
        self._place_cursor(selected)
        if reordered:
            self.refresh()  # every visible line shows another device now
            return
        top, bottom = self._visible_range()
        for index in range(top, bottom):
            if self._update_row(order[index]):
                self._refresh_row(index)

    def _place_cursor(self, selected: str | None) -> None:
        keep = self._cursor_key if self._cursor_key in self._position else None
        if keep is None:
            keep = selected if selected in self._position else None
        row = self._position[keep] if keep is not None else 0
        if row != self._cursor or self._cursor_key != keep:
            self._set_cursor(row, announce=False)

    def _resize_virtual(self) -> None:
        self.virtual_size = Size(self._table_width, len(self._order) + 1)

    def _visible_range(self) -> tuple[int, int]:
        top = int(self.scroll_y)
        height = max(1, self.scrollable_content_region.height - 1)
        return top, min(len(self._order), top + height)

    def _update_row(self, key: str) -> bool:
        """Re-render the cells of ``key`` whose change key moved; whether anything changed."""
        ref = self._pending.pop(key, None)
        ctx = self._ctx
        if ref is None or ctx is None:
            return False
        row = self._rows[key]
        changed = False
        for i, column in enumerate(self.spec):
            value = column.key(ref, ctx)
            old = row.keys[i]
            if value != old:
                row.keys[i] = value
                row.cells[i] = render_cell(column, column.render(value, ctx), self.app.console)
                row.styled[i] = row.line = None
                self.cell_updates += old is not UNSET
                changed = True
        if changed or row.strip is None:
            row.strip = Strip([s for cell in row.cells for s in cell], self._table_width)
        return changed

    def flush_visible(self) -> None:
        """Bring the rows on screen up to date (done by :meth:`show`; kept for callers)."""
        top, bottom = self._visible_range()
        for index in range(top, bottom):
            if self._update_row(self._order[index]):
                self._refresh_row(index)

    def flush_all(self) -> None:
        """Bring every row up to date (tests and screenshots of whole tables)."""
        for key in list(self._pending):
            self._update_row(key)
        self.refresh()

    # -- what tests and the app read --------------------------------------------------------
    @property
    def order(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)

    @property
    def row_count(self) -> int:
        """How many devices the table holds (on screen or not)."""
        return len(self._order)

    @property
    def columns(self) -> list[Column]:
        """The columns shown."""
        return list(self.spec)

    @property
    def rows(self) -> dict[str, tuple[Hashable, ...]]:
        """Row key -> the change keys of its cells (every row brought up to date first)."""
        for key in list(self._pending):
            self._update_row(key)
        return {key: tuple(row.keys) for key, row in self._rows.items()}

    @property
    def cursor_row(self) -> int:
        """Index of the highlighted row."""
        return self._cursor

    def get_cell(self, row_key: str, column_id: str) -> Text:
        """The text a cell shows now (brought up to date first)."""
        self._update_row(row_key)
        index = next(i for i, c in enumerate(self.spec) if c.id == column_id)
        value = self._rows[row_key].keys[index]
        if value is UNSET or self._ctx is None:
            raise KeyError(f"{row_key!r} has not been drawn")
        return safe_text(self.spec[index].render(value, self._ctx))

    def get_row_index(self, row_key: str) -> int:
        """Position of ``row_key`` in display order."""
        return self._position[row_key]

    # -- cursor and keys -----------------------------------------------------------------
    def move_cursor(self, *, row: int, animate: bool = False, scroll: bool = True) -> None:
        """Highlight row ``row`` (clamped), scrolling it into view."""
        self._set_cursor(row, announce=True, scroll=scroll)

    def _set_cursor(self, row: int, *, announce: bool, scroll: bool = True) -> None:
        row = self._place(row, scroll)
        key = self._order[row] if self._order else None
        self._cursor_key = key
        if key is not None and announce and key != self._announced:
            self._announced = key
            self.post_message(self.RowHighlighted(self, key))
        elif not announce:
            self._announced = key

    def _header_clicked(self, x: int) -> None:
        for column in self.spec:
            x -= column.width + 2 * PAD
            if x < 0:
                self.post_message(self.HeaderSelected(self, column.id))
                break

    # -- drawing -------------------------------------------------------------------------
    def _row(self, key: str) -> Row:
        self._update_row(key)
        return self._rows[key]

    def _header_strip(self) -> Strip:
        if self._header is None:
            segments = [s for c in self.spec for s in render_cell(c, Text(c.label), self.app.console)]
            self._header = Strip(segments, self._table_width)
        return self._header
