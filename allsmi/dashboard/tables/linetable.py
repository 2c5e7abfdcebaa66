"""What the device table and the processes panel share: a header line fixed above rows drawn
line by line (Textual's ``ScrollView`` with ``render_line``), a row cursor, its keys and clicks.

A subclass keeps its rows (``_order``, the row keys in display order), says how a row is
brought up to date before it is drawn (:meth:`LineTable._row`) and how its header is drawn
(``_header_strip``), and names its component classes through :func:`table_css`.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region
from textual.scroll_view import ScrollView
from textual.strip import Strip

from allsmi.dashboard.tables.lines import lines_with_blank_tail
from allsmi.dashboard.tables.tablerows import Row, plain_line


def table_css(widget: str, prefix: str, extra: str = "") -> str:
    """The ``DEFAULT_CSS`` of a line table named ``widget`` whose component classes are
    ``<prefix>--header`` and ``<prefix>--cursor`` (the cursor as Textual's DataTable draws it)."""
    return f"""
    {widget} {{
        {extra}
        background: $surface;
        color: $foreground;
        &:focus {{
            background-tint: $foreground 5%;
            & > .{prefix}--cursor {{
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }}
            & > .{prefix}--header {{ background-tint: $foreground 5%; }}
        }}
        & > .{prefix}--header {{ text-style: bold; background: $panel; color: $foreground; }}
        &:ansi > .{prefix}--header {{ background: ansi_bright_blue; color: ansi_default; }}
        & > .{prefix}--cursor {{
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }}
        &:nocolor > .{prefix}--cursor {{ text-style: reverse; }}
        &:nocolor > .{prefix}--header {{ text-style: bold underline; }}
    }}
    """


class LineTable(ScrollView, can_focus=True):
    """A header line and rows beneath it, with a row cursor (see the module's docstring)."""

    #: The component classes' prefix (``device-table``: ``device-table--header``, ``--cursor``).
    COMPONENT_PREFIX: ClassVar[str] = ""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "scroll_top", "First row", show=False),
        Binding("end,ctrl+end", "scroll_bottom", "Last row", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._order: list[str] = []
        self._table_width = 0
        self._cursor = 0
        self._pass_styles: tuple[Style, Style, Style, Style] | None = None
        self.lines_rendered = 0
        """Lines handed to Textual since the table was built (for tests and the benchmark)."""

    # -- what a subclass provides --------------------------------------------------------
    _row: Callable[[str], Row]
    """Row ``key``, brought up to date for drawing."""
    _header_strip: Callable[[], Strip]
    """The header line (kept until the theme or the columns change)."""

    def _header_clicked(self, x: int) -> None:
        """A click on the header line, ``x`` cells from the table's left edge (nothing here)."""

    def move_cursor(self, *, row: int, animate: bool = False, scroll: bool = True) -> None:
        """Highlight row ``row`` (clamped), scrolling it into view."""
        self._place(row, scroll)

    # -- the cursor ------------------------------------------------------------------------
    def _place(self, row: int, scroll: bool) -> int:
        """Move the cursor to row ``row`` (clamped), repainting both lines; the row it is on."""
        row = max(0, min(row, len(self._order) - 1))
        if row != self._cursor:
            self._refresh_row(self._cursor)
            self._refresh_row(row)
        self._cursor = row
        if scroll and self._order:
            height = max(1, self.scrollable_content_region.height - 1)
            top = int(self.scroll_y)
            if row < top:
                self.scroll_to(y=row, animate=False, force=True)
            elif row >= top + height:
                self.scroll_to(y=row - height + 1, animate=False, force=True)
        return row

    def _refresh_row(self, index: int) -> None:
        """Repaint the line of row ``index`` if it is on screen (only the table's own cells:
        ScrollView.refresh_line's wider region would repaint the scrollbar too)."""
        y = index + 1 - int(self.scroll_y)
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self._cursor - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self._cursor + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self._cursor - self._page())

    def action_page_down(self) -> None:
        self.move_cursor(row=self._cursor + self._page())

    def action_scroll_top(self) -> None:
        self.move_cursor(row=0)

    def action_scroll_bottom(self) -> None:
        self.move_cursor(row=len(self._order) - 1)

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            self._header_clicked(offset.x + int(self.scroll_x))
            return
        row = int(self.scroll_y) + offset.y - 1
        if 0 <= row < len(self._order):
            self.move_cursor(row=row)
            event.stop()

    # -- drawing -------------------------------------------------------------------------
    def render_lines(self, crop: Any) -> list[Strip]:
        base = self.rich_style
        header = self.get_component_rich_style(f"{self.COMPONENT_PREFIX}--header")
        cursor = self.get_component_rich_style(f"{self.COMPONENT_PREFIX}--cursor")
        self._pass_styles = (base, base + header, base + cursor,
                             Style.from_color(cursor.color, cursor.bgcolor))
        shown = 1 + max(0, len(self._order) - int(self.scroll_y))  # the header and the rows shown
        return lines_with_blank_tail(self, crop, shown, super().render_lines)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base, header, cursor, cursor_post = self._pass_styles or (self.rich_style,) * 3 + (Style(),)
        self.lines_rendered += 1
        if y == 0:
            strip, style, post = self._header_strip(), header, None
        else:
            index = scroll_y + y - 1
            if index >= len(self._order):
                return Strip.blank(width, base)
            row = self._row(self._order[index])
            if index != self._cursor and scroll_x == 0 and width >= self._table_width:
                return plain_line(row, base, width, self._table_width)
            strip = row.strip or Strip.blank(self._table_width)
            style, post = (cursor, cursor_post) if index == self._cursor else (base, None)
        # One Strip per line (each Strip carries its own caches): pad and crop the segments.
        room = width - self._table_width
        if scroll_x == 0 and room >= 0:
            segments = [*strip, Segment(" " * room)] if room else list(strip)
        else:
            segments = list(strip.extend_cell_length(scroll_x + width).crop(scroll_x, scroll_x + width))
        return Strip(Segment.simplify(Segment.apply_style(segments, style, post)), width)
