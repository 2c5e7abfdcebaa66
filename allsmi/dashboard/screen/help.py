"""The help screen: every key binding of the app, generated from its BINDINGS."""

from __future__ import annotations

from typing import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from allsmi.dashboard.screen.keynames import KEY_NAMES
from allsmi.dashboard.views.render import LOAD_HOT, LOAD_WARN, TEMP_HOT, TEMP_WARN


def key_label(keys: str) -> str:
    """``"question_mark,f1"`` -> ``"? F1"``."""
    return " ".join(KEY_NAMES.get(k.strip(), k.strip()) for k in keys.split(","))


def help_table(bindings: Iterable[Binding], view: str = "devices") -> Table:
    """Two columns: keys and what they do (``bindings``: those that act in ``view``; the keys
    without a binding too, where they act)."""
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("key", no_wrap=True)
    table.add_column("action")
    for binding in bindings:
        table.add_row(Text(key_label(binding.key), style="bold"), binding.tooltip or binding.description)
    devices = view == "devices"
    table.add_row(Text("↑ ↓ PgUp PgDn Home End", style="bold"),
                  "move through the devices (the details follow)" if devices else "move through the rows")
    table.add_row(Text("mouse", style="bold"),
                  "click a row to select it, a column header to sort by it; wheel scrolls")
    if devices:
        table.add_row(Text("Tab", style="bold"),
                      "move between the device table, the details and the processes panel "
                      "(the arrows and PgUp PgDn then scroll it)")
    else:
        table.add_row(Text("Enter", style="bold"),
                      "on a group, vendor, host or idle holder row: show its devices (Esc goes back)")
    return table


LEGEND = (f"Colors: utilization and memory turn to the warning color at {LOAD_WARN:.0f}% and the "
          f"critical color at {LOAD_HOT:.0f}%; temperature at {TEMP_WARN:.0f}°C and {TEMP_HOT:.0f}°C. "
          "Bars and numbers carry the same information, so NO_COLOR=1 loses nothing. "
          "N/A means the device does not report that value. NPU rows draw one block per core. "
          "'stale' means the host stopped answering; its last data is shown with its age.")


class HelpScreen(ModalScreen[None]):
    """Lists every key; any of Esc, q, ? or F1 closes it."""

    BINDINGS = [Binding("escape,question_mark,f1,h", "app.pop_screen", "Close help"),
                Binding("q", "app.quit", "Quit")]  # `q` quits everywhere, as the help says

    def __init__(self, bindings: Iterable[Binding], view: str = "devices") -> None:
        super().__init__()
        self._keys = list(bindings)
        self._view = view

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text(f"allsmi dashboard — keys of the {self._view} view", style="bold"),
                         id="help-title")
            yield Static(help_table(self._keys, self._view), id="help-keys")
            yield Static(Text(LEGEND, style="dim"), id="help-legend")
            yield Static(Text("Esc or ? closes this screen; q quits.", style="italic"), id="help-close")
