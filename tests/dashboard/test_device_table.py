"""The line-based device table: only lines whose text changed are drawn again, rows off
screen are not drawn until they scroll in, and what they then show is current."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .conftest import frozen, screen_text
from .fixtures import groups_config, scaled

pytestmark = pytest.mark.timeout(120)


def _one_device_changed(snap: Snapshot, index: int, util: float) -> Snapshot:
    devices = list(snap.devices)
    devices[index] = replace(devices[index], utilization_percent=util)
    return replace(snap, devices=tuple(devices))


async def test_a_refresh_draws_only_the_lines_that_changed(sim_snapshots: list[Snapshot]) -> None:
    first = sim_snapshots[0]
    same = replace(first, timestamp=sim_snapshots[1].timestamp)  # new object, same values
    target = next(i for i, d in enumerate(first.devices) if d.parent is None and d.index == 3
                  and d.utilization_percent is not None)
    old = first.devices[target].utilization_percent or 0.0
    changed = _one_device_changed(same, target, 99.0 if old < 50 else 1.0)
    source = StaticSource.of([first, same, changed], clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    # 100 columns: no history sparkline, whose every new sample would redraw the lines.
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        table = app.device_table
        assert "history" not in [c.id for c in table.columns]
        before = table.lines_rendered
        source.advance()
        app.poll()
        await pilot.pause()
        assert table.lines_rendered == before, "identical values must not draw any line"
        source.advance()
        app.poll()
        await pilot.pause()
        # One device changed: its line, and no other line of the table, is drawn again.
        assert table.lines_rendered - before == 1
        assert table.cell_updates == 1
        key = next(r.key for r in app.shown if r.device.id == first.devices[target].id)
        assert str(table.get_cell(key, "util")).strip().endswith(("99%", "1%"))


async def test_rows_off_screen_are_drawn_only_when_they_scroll_in(sim_snapshots: list[Snapshot]) -> None:
    big = [scaled(s, 16) for s in sim_snapshots[:3]]  # 592 rows
    source = StaticSource.of(big, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = app.device_table
        height = table.size.height
        before = table.lines_rendered
        for _ in range(2):
            source.advance()
            app.poll()
            await pilot.pause()
        # Two refreshes of 592 devices draw at most the lines on screen, twice.
        assert 0 < table.lines_rendered - before <= 2 * height
        assert table.cell_updates <= 2 * height * len(table.columns)
        # The last rows were never drawn; scrolled in, they show the last snapshot's values.
        await pilot.press("end")
        await pilot.pause()
        last = big[-1].devices[-1]
        assert app.selected == table.order[-1]
        text = screen_text(app)
        assert "Blackhole" in text
        shown = str(table.get_cell(table.order[-1], "temp")).strip()
        expected = "N/A" if last.temperature_celsius is None else f"{round(last.temperature_celsius)}°C"
        assert shown == expected and shown in text


async def test_keys_page_and_click_move_the_cursor_and_the_details(sim_snapshots: list[Snapshot]) -> None:
    source = StaticSource.of([scaled(s, 4) for s in sim_snapshots[:2]], clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        table = app.device_table
        await pilot.press("down", "down")
        assert table.cursor_row == 2 and app.selected == table.order[2]
        await pilot.press("pagedown")
        assert table.cursor_row > 2 and app.selected == table.order[table.cursor_row]
        assert table.scroll_y > 0  # the cursor stays on screen
        await pilot.press("home")
        assert table.cursor_row == 0 and table.scroll_y == 0
        ref = next(r for r in app.shown if r.key == table.order[0])
        # the details panel follows: its first line names the device (the id line is below
        # the fold at 30 rows, under the activity, links and holders' lines)
        dev = ref.device
        assert f"{dev.backend} {dev.index}  {dev.name}" in screen_text(app)
        await pilot.click("#device-table", offset=(5, 3))
        await pilot.pause()
        assert app.selected == table.order[2]
        # A new order keeps the cursor on its device.
        clicked = app.selected
        await pilot.press("u")
        assert table.order != [r.key for r in sorted(app.shown, key=lambda r: r.position)]
        assert app.selected == clicked == table.order[table.cursor_row]


async def test_wide_and_hostile_names_keep_the_columns_aligned(sim_snapshots: list[Snapshot]) -> None:
    from rich.cells import cell_len

    def renamed(snap: Snapshot) -> Snapshot:
        devices = list(snap.devices)
        devices[0] = replace(devices[0], name="漢字" * 20 + "[/]")
        devices[1] = replace(devices[1], name="x\x1b[2J" + "é" * 40)
        return replace(snap, devices=tuple(devices))
    source = StaticSource.of([renamed(s) for s in sim_snapshots[:2]], clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        lines = [line for line in screen_text(app).splitlines()
                 if re.match(r"^\s+\d+\s+(nvidia|amd)\s", line) and "°C" in line]
        assert len(lines) > 5 and "\x1b" not in "".join(lines)
        assert len({cell_len(line[:line.index("°C")]) for line in lines}) == 1, lines[:3]
        assert "漢字" in lines[0]
