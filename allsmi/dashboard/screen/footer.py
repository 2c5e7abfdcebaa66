"""The key line at the bottom: the keys that work now, drawn as one line by one widget.

Textual's ``Footer`` draws the same line from a scrollable container and one widget per key
(each with its own styles, caches and message queue), rebuilt on every focus or view change:
about 0.8 MiB of the dashboard's resident memory (``benchmarks/dashboard.py``). This widget
draws the keys Textual's footer would show, with its styles (``$footer-*``), and a click on a
key presses it, as a click on Textual's footer does.
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget

#: How a key that does nothing now is drawn (Textual's footer: ``text-style: dim``).
DIM = Style(dim=True)


class KeyFooter(Widget):
    """The shown bindings of the focused widget, its screen and the app, one after another."""

    COMPONENT_CLASSES = {"footer-key--key", "footer-key--description"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .footer-key--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._keys: list[tuple[int, int, str, bool]] = []
        """(first cell, end cell, key, enabled) of each key drawn, for clicks."""

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Any) -> None:
        if self.is_attached and screen is self.screen:
            self.refresh()

    def render(self) -> Text:
        key_style = self.get_component_rich_style("footer-key--key")
        description_style = self.get_component_rich_style("footer-key--description")
        line = Text(no_wrap=True, end="")
        keys: list[tuple[int, int, str, bool]] = []
        seen: set[str] = set()
        width = self.size.width or 10_000
        offered = getattr(self.app, "offered", None)  # (the keys that act in the view shown)
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue  # one key per action, as Textual's footer shows them
            if offered is not None and not offered(binding.action):
                continue
            seen.add(binding.action)
            start = line.cell_len
            dim = Style() if enabled else DIM
            entry = Text(f" {self.app.get_key_display(binding)} ", key_style + dim)
            if binding.description:
                entry.append(f"{binding.description} ", description_style + dim)
            if start + entry.cell_len > width - 1:  # whole keys only; the cut is marked
                line.append("\u2026", description_style)
                break
            line.append_text(entry)
            keys.append((start, line.cell_len, binding.key, enabled))
        self._keys = keys
        return line

    def on_resize(self) -> None:
        self.refresh()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        for start, end, key, enabled in self._keys:
            if start <= event.x < end:
                if enabled:
                    self.app.simulate_key(key.split(",")[0])
                else:
                    self.app.bell()
                return
