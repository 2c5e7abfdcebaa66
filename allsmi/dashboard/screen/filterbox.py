"""The text filter's input box: Enter leaves it before the next key is read.

Keys reach the focused widget through the app's queue. On a busy host several keys typed right
after Enter are already queued for the box when it handles Enter, so they would go into the
filter (``zzz`` after ``nothing`` Enter: ``zzz-nothing?``). Here Enter closes the box at once,
and a key the box receives after it was closed is handed back to the app, which gives it to
whatever has the focus now (the view), as if the box had never been in the way.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class FilterInput(Input):
    """An :class:`~textual.widgets.Input` that stops taking keys once Enter is pressed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.closed = True
        """Set by Enter, cleared when the box is opened again (``open``)."""

    def open(self, value: str) -> None:
        """Show the box holding ``value``, focused, taking keys."""
        self.closed = False
        self.add_class("-visible")
        self.value = value
        self.focus()

    async def _on_key(self, event: events.Key) -> None:
        if self.closed:  # typed after Enter, queued before the focus moved: not the filter's
            event.stop()
            event.prevent_default()
            self.app.post_message(events.Key(event.key, event.character))
            return
        if event.key == "enter":
            self.closed = True
            # Enter is the box's alone: stopped here, it never reaches the view that has the
            # focus once the box closes (whose own Enter drills into the highlighted row).
            event.stop()
            event.prevent_default()
            close = getattr(self.app, "close_filter", None)
            if close is not None:
                close()  # the focus moves now, before the app reads the next key
            return
        await super()._on_key(event)
