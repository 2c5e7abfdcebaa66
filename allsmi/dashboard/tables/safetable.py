"""A DataTable that shows every cell as safe text (the panels' and totals' tables)."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from allsmi.dashboard.views.render import safe_text


class SafeTable(DataTable[Any]):
    """A DataTable whose every cell goes through :func:`safe_text`: a ``str`` cell is never
    parsed as Rich markup (``[/]`` in a command line is text) and control characters never
    reach the terminal, whatever a process, a device or a host sent."""

    def add_row(self, *cells: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().add_row(*(safe_text(c) for c in cells), **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().update_cell(row_key, column_key, safe_text(value), **kwargs)
