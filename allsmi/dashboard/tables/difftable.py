"""The views' tables built on first use (groups, vendors, idle, hosts): Textual ``DataTable`` widgets
fed whole rows, only changed cells rewritten.

Imported when one of those views is first shown, not at start: the node view (device table,
processes panel) is line-based and needs no ``DataTable`` (0.4 MiB of module code).
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Sequence

from rich.text import Text

from allsmi.dashboard.tables.columns import RowText
from allsmi.dashboard.tables.safetable import SafeTable


class DiffTable(SafeTable):
    """A DataTable fed whole rows; only changed cells are rewritten. The cursor stays on its
    row (by key) when the rows are sorted again, others come or go, or the columns change."""

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._spec = list(columns)
        self._rows: dict[str, tuple[Hashable, ...]] = {}
        self._heights: dict[str, int] = {}
        """Lines of each row (a cell with line breaks makes a taller row)."""
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, label, width in self._spec:
            self.add_column(label, key=key, width=width)

    def set_rows(self, rows: Iterable[tuple[str, Sequence[Any]]],
                 columns: Sequence[tuple[str, str, int | None]] | None = None) -> None:
        """Show ``rows`` (row key, cells) in this order; ``columns`` (id, label, width), when
        given, replace the table's columns (a new width: the table is filled again)."""
        rows = list(rows)
        count = self._update_count
        selected = self._order[self.cursor_row] if 0 <= self.cursor_row < len(self._order) else None
        if columns is not None and list(columns) != self._spec:
            self._spec = list(columns)
            self.clear(columns=True)
            self._rows, self._order, self._heights = {}, [], {}
            for key, label, width in self._spec:
                self.add_column(label, key=key, width=width)
        wanted = {key for key, _ in rows}
        gone = [k for k in self._rows if k not in wanted]
        if len(gone) > 16 and 2 * len(gone) > len(self._rows):  # most rows go: start afresh
            self.clear()
            self._rows, self._order, self._heights = {}, [], {}
            gone = []
        for key in gone:
            self.remove_row(key)
            del self._rows[key]
            self._heights.pop(key, None)
        for key, cells in rows:
            cells = tuple(_fit(c, w) for c, (_, _, w) in zip(cells, self._spec))
            cells = (_keyed(cells[0], key), *cells[1:])
            frozen = tuple(_freeze(c) for c in cells)
            old = self._rows.get(key)
            height = 1 + max((c.plain.count("\n") for c in cells if isinstance(c, Text)), default=0)
            if old is not None and height != self._heights.get(key, 1):  # a row's height is fixed
                self.remove_row(key)
                old = None
            self._heights[key] = height
            if old is None:
                self.add_row(*cells, key=key, height=height)
            elif old != frozen:
                for (column, _label, width), cell, before, after in zip(self._spec, cells, old, frozen):
                    if before != after:
                        self.update_cell(key, column, cell, update_width=width is None)
            self._rows[key] = frozen
        order = [key for key, _ in rows]
        if order != self._order:
            position = {key: i for i, key in enumerate(order)}
            self._sort_by(position)
            self._order = order
            if selected in position and position[selected] != self.cursor_row:
                self.move_cursor(row=position[selected])
        if self._update_count != count:
            # DataTable keys its render caches by an update counter that every change bumps:
            # entries of earlier counts are never read again, yet stay until the caches are full
            # (1,000 lines and rows, 10,000 cells): a panel that changes every second grows by
            # its whole size a second for minutes. Dropped here; the new count has none yet.
            self._clear_caches()

    def _sort_by(self, position: dict[str, int]) -> None:
        first = self._spec[0][0]
        self.sort(first, key=lambda cell: position[cell.row_key])

    @property
    def row_keys(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)


def _fit(cell: Any, width: int | None) -> Any:
    """A one-line cell longer than its column's ``width`` cut with an ellipsis (never silently)."""
    if width is None:
        return cell
    text = cell if isinstance(cell, Text) else Text(str(cell))
    if "\n" in text.plain or text.cell_len <= width:
        return cell
    text = text.copy()
    text.truncate(width, overflow="ellipsis")
    return text


def _keyed(cell: Any, key: str) -> RowText:
    """The first cell as a :class:`RowText`, so rows can be sorted by key."""
    if isinstance(cell, Text):
        return RowText(cell.plain, key, style=str(cell.style), justify=cell.justify)
    return RowText(str(cell), key)


def _freeze(cell: Any) -> Hashable:
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple((s.start, s.end, str(s.style)) for s in cell.spans))
    return cell
