"""The memory and CPU floor of a Textual dashboard (benchmark helper for benchmarks/dashboard.py).

A minimal Textual app that redraws a 40-line text table once a second, as a monitor does:
one ``Static`` whose content is replaced by a fresh 40-row table of changing numbers on a
1 s timer. What allsmi's dashboard holds beyond this is what allsmi itself costs.
Usage: python benchmarks/_textual_floor.py [ROWS]
"""

from __future__ import annotations

import sys
import time

from textual.app import App, ComposeResult
from textual.widgets import Static


class Floor(App[None]):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows
        self.tick = 0

    def compose(self) -> ComposeResult:
        yield Static(self._table(), id="table")

    def on_mount(self) -> None:
        self.set_interval(1.0, self._redraw)

    def _table(self) -> str:
        t = time.time()
        lines = [f"{'#':>3}  {'name':<24} {'util':>6} {'memory':>12} {'power':>8} {'temp':>6}"]
        for i in range(self.rows - 1):
            k = (self.tick * 7 + i * 13) % 100
            lines.append(f"{i:>3}  {'device-' + str(i):<24} {k:>5}% {k * 819:>10}Mi "
                         f"{100 + k * 5:>7}W {30 + k % 50:>5}C")
        lines.append(f"tick {self.tick} at {t:.0f}")
        return "\n".join(lines)

    def _redraw(self) -> None:
        self.tick += 1
        self.query_one("#table", Static).update(self._table())


if __name__ == "__main__":
    Floor(int(sys.argv[1]) if len(sys.argv) > 1 else 40).run()
