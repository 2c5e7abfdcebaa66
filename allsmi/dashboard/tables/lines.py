"""A panel of single-line texts, each drawn once and repainted only when it changed.

Textual's ``Static`` renders its whole content again (every line through Rich's
console, then through a ``Visual``) whenever it is updated, even when one line
of twelve changed. The summary bar and the detail panel are updated every
refresh, so they are line-based widgets instead (Textual's line API): each line
is a :class:`rich.text.Text` kept with its rendered :class:`~textual.strip.Strip`,
and a new set of lines repaints only the lines whose text or styles changed.
Every line is one screen line (no wrapping; cut with an ellipsis at the width).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


def lines_with_blank_tail(widget: Widget, crop: Region, content_lines: int,
                          render: Callable[[Region], list[Strip]]) -> list[Strip]:
    """The lines of ``crop`` as ``render`` (Textual's ``render_lines``) draws them, where the
    widget's lines from ``content_lines`` on are blank: one blank line is drawn and repeated.
    Textual's line cache would keep a styled copy of each (a strip with its own caches).
    ``crop`` counts the widget's top border and padding too (the processes panel's border carries
    its title): the first blank line is below them and the content."""
    x, y, width, height = crop
    drawn = max(1, widget.styles.gutter.top + content_lines + 1 - y)  # up to the first blank line
    if drawn >= height or widget.styles.gutter.bottom:  # a bottom border or padding: lines differ
        return render(crop)
    lines = render(Region(x, y, width, drawn))
    return lines + [lines[-1]] * (height - drawn)


def _same(a: Text, b: Text) -> bool:
    return a.plain == b.plain and a.spans == b.spans and a.style == b.style


class TextLines(Widget):
    """Lines of text (one screen line each), repainted line by line."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: list[Text] = []
        self._strips: list[Strip | None] = []
        self._drawn_as: tuple[int, Style] | None = None
        """(width, base style) the cached strips were drawn with."""
        self.lines_rendered = 0
        """Lines turned into strips since the widget was built (tests and the benchmark)."""

    @property
    def lines(self) -> list[Text]:
        """The lines shown (copies are not made: do not change them)."""
        return list(self._lines)

    @property
    def plain(self) -> str:
        """The characters shown, one line per line."""
        return "\n".join(line.plain for line in self._lines)

    def set_lines(self, lines: Sequence[Text]) -> None:
        """Show ``lines``; only the lines that differ from those shown are repainted."""
        old = self._lines
        width = self.size.width
        for y, line in enumerate(lines):
            if y >= len(old) or not _same(old[y], line):
                if y < len(self._strips):
                    self._strips[y] = None
                self.refresh(Region(0, y, width, 1))
        if len(lines) < len(old):
            self.refresh(Region(0, len(lines), width, len(old) - len(lines)))
        self._lines = list(lines)
        del self._strips[len(lines):]
        self._strips.extend([None] * (len(lines) - len(self._strips)))

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn_as = None  # a theme or class change: every strip again

    def render_lines(self, crop: Region) -> list[Strip]:
        return lines_with_blank_tail(self, crop, len(self._lines), super().render_lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if self._drawn_as != (width, base):
            self._drawn_as = (width, base)
            self._strips = [None] * len(self._lines)
        if y >= len(self._lines):
            return Strip.blank(width, base)
        strip = self._strips[y]
        if strip is None:
            self.lines_rendered += 1
            text = self._lines[y].copy()
            if "\n" in text.plain:  # one screen line each: a break would end the strip early
                text.plain = text.plain.replace("\n", " ")
            text.no_wrap = True
            if text.cell_len > width:
                text.truncate(width, overflow=text.overflow or "ellipsis")
            strip = Strip(text.render(self.app.console, end=""), text.cell_len)
            strip = strip.extend_cell_length(width).apply_style(base).simplify()
            self._strips[y] = strip
        return strip
