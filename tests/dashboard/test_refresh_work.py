"""The work a refresh does: the local dashboard reads each snapshot when the collector pushes
it (no polling in between), and line-based panels repaint only the lines that changed."""

from __future__ import annotations

import threading
import time
from typing import Callable

from rich.text import Text
from textual.app import App, ComposeResult

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.tables.lines import TextLines
from allsmi.dashboard.sources import NodeSource
from allsmi.schema import Snapshot

from .conftest import screen_text
from .fixtures import simulated_snapshots


class PushingCollector:
    """A collector stand-in whose cycles the test runs by hand, from another thread."""

    interval = 0.2

    def __init__(self, snapshots: list[Snapshot]) -> None:
        self.snapshots = snapshots
        self.latest: Snapshot | None = snapshots[0]
        self.history: tuple[Snapshot, ...] = (snapshots[0],)
        self.subscribers: list[Callable[[Snapshot], None]] = []

    def subscribe(self, callback: Callable[[Snapshot], None]) -> None:
        self.subscribers.append(callback)

    def cycle(self, index: int) -> None:
        def run() -> None:
            self.latest = self.snapshots[index]
            for callback in self.subscribers:
                callback(self.snapshots[index])
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()


async def wait_for(condition: Callable[[], bool], pilot: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.02)  # type: ignore[attr-defined]


async def test_local_dashboard_redraws_on_each_push_and_not_in_between() -> None:
    snapshots = simulated_snapshots(4, step=1.0)
    collector = PushingCollector(snapshots)
    app = DashboardApp(NodeSource(collector))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert collector.subscribers, "the app subscribes to the local collector"
        start = app.renders
        for index in (1, 2, 3):
            collector.cycle(index)
            await wait_for(lambda: app.renders == start + index, pilot)
        assert app.device_table.row_count == len(app.all_refs()) > 0
        # No push: the data is not read again, whatever the poll period, until the watchdog
        # (1.5 intervals after the last push) redraws the growing age.
        renders = app.renders
        await pilot.pause(0.15)
        assert app.renders == renders
        polls = []
        original = app.poll
        app.poll = lambda: (polls.append(time.monotonic()), original())[1]  # type: ignore[method-assign]
        await wait_for(lambda: len(polls) >= 2, pilot)  # the watchdog keeps the age moving
        assert app.renders == renders  # the same snapshot: nothing redrawn but the summary


class Lines(App[None]):
    def compose(self) -> ComposeResult:
        yield TextLines(id="lines")


async def test_text_lines_repaint_only_the_lines_that_changed() -> None:
    app = Lines()
    async with app.run_test(size=(60, 8)) as pilot:
        panel = app.query_one("#lines", TextLines)
        panel.set_lines([Text(f"line {i}", style="bold" if i == 2 else "") for i in range(5)])
        await pilot.pause()
        drawn = panel.lines_rendered
        assert drawn == 5
        assert "line 4" in screen_text(app)  # type: ignore[arg-type]
        panel.set_lines([Text(f"line {i}" + (" changed" if i == 3 else ""),
                              style="bold" if i == 2 else "") for i in range(5)])
        await pilot.pause()
        assert panel.lines_rendered == drawn + 1
        assert "line 3 changed" in screen_text(app)  # type: ignore[arg-type]
        # A style change is a change too; fewer lines clear the rest.
        panel.set_lines([Text("line 0"), Text("line 1"), Text("line 2")])
        await pilot.pause()
        assert panel.lines_rendered == drawn + 2
        text = screen_text(app)  # type: ignore[arg-type]
        assert "line 2" in text and "line 3" not in text and "line 4" not in text
        # Too long for the width: cut with an ellipsis on one line.
        panel.set_lines([Text("x" * 100)])
        await pilot.pause()
        first = screen_text(app).splitlines()[0]  # type: ignore[arg-type]
        assert first.rstrip().endswith("…") and len(first.rstrip()) == 60


async def test_an_empty_process_panel_is_not_repainted_on_every_push() -> None:
    """No process anywhere: each push leaves the process panel as it is (it repainted itself
    whole every refresh, a tenth of an idle dashboard's CPU; issue 36)."""
    from dataclasses import replace

    from allsmi.schema import derive

    snapshots = [replace(s, devices=tuple(derive(d, processes=()) for d in s.devices))
                 for s in simulated_snapshots(5, step=1.0)]
    collector = PushingCollector(snapshots)
    app = DashboardApp(NodeSource(collector))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        table = app.process_table
        repaints: list[object] = []
        original = table.refresh
        table.refresh = lambda *a, **k: (repaints.append(a), original(*a, **k))[1]  # type: ignore[method-assign]
        start = app.renders
        for index in (1, 2, 3, 4):
            collector.cycle(index)
            await wait_for(lambda: app.renders == start + index, pilot)
        assert table.row_count == 0
        assert repaints == []


async def test_the_columns_are_laid_out_again_only_when_the_width_changes(monkeypatch) -> None:
    from allsmi.dashboard.screen import app as app_module

    laid_out: list[int] = []
    real = app_module.columns_for
    monkeypatch.setattr(app_module, "columns_for",
                        lambda width, *a, **k: (laid_out.append(width), real(width, *a, **k))[1])
    snapshots = simulated_snapshots(4, step=1.0)
    collector = PushingCollector(snapshots)
    app = DashboardApp(NodeSource(collector))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        start, before = app.renders, len(laid_out)
        for index in (1, 2, 3):
            collector.cycle(index)
            await wait_for(lambda: app.renders == start + index, pilot)
        assert len(laid_out) == before  # three refreshes of the same devices: no new layout
        await pilot.resize_terminal(150, 60)
        await wait_for(lambda: len(laid_out) > before, pilot)
        assert laid_out[-1] == 148
