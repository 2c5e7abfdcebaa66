"""What an operator reads off the screen: numbers keep their unit at any width, sums add like
with like, panels end where their rows end, energy counts at long intervals (Pilot)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import DeviceSample, Snapshot

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import groups_config, simulated_snapshots

pytestmark = pytest.mark.timeout(120)

MiB = 1024 ** 2


@pytest.fixture(scope="module")
def snaps() -> list[Snapshot]:
    return simulated_snapshots(3, step=1.0, attribution=True)


def tweak(snapshots: list[Snapshot], change: Callable[[DeviceSample], DeviceSample]) -> list[Snapshot]:
    """The snapshots with every device passed through ``change``."""
    return [replace(s, devices=tuple(change(d) for d in s.devices)) for s in snapshots]


def lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


async def test_the_processes_panel_is_blank_below_its_last_row(snaps: list[Snapshot]) -> None:
    """The panel's top border (its title) is a line of the widget: the blank lines under the
    rows started one line late and repeated the last row (or the header) down the panel."""
    app, source = make_app(snaps)
    async with app.run_test(size=(160, 45)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("down")  # nvidia 1: one process
        await pilot.pause()
        procs = [p for r in app.shown if r.key == app.selected for p in r.device.processes or ()]
        assert len(procs) == 1
        text = screen_text(app)
        panel = [line.partition("│")[2] for line in text.splitlines() if "│" in line]
        assert sum(" pid " in line for line in panel) == 1  # the header, once
        assert sum(str(procs[0].pid) in line for line in panel) == 1  # the row, once
        assert panel[-1].strip() == ""


async def test_a_cut_never_takes_a_number_or_its_unit(snaps: list[Snapshot]) -> None:
    """1203 W of 1400 in the narrow layout read ``1203/140…`` (140 W?), 1010 MiB of 192 GiB
    read ``1010.0 MiB/192.0 G…``, a process's 1010 MiB ``1010.0 M…``, and power without a
    limit had no unit at all (``93/N/A``)."""
    first = snaps[0].devices[0].id
    amd = next(d.id for d in snaps[0].devices if d.vendor == "amd")

    def change(dev: DeviceSample) -> DeviceSample:
        if dev.id == first:
            return replace(dev, power_watts=1203.0, power_limit_watts=1400.0)
        if dev.id == amd:
            return replace(dev, memory_used_bytes=1010 * MiB, processes=tuple(
                replace(p, memory_bytes=1010 * MiB) for p in dev.processes or ()))
        return dev
    frames = tweak(snaps, change)
    app, source = make_app(frames)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        row = screen_text(app).splitlines()[3]
        # whole, with its unit (a model name may be cut: "H100 80GB HB…", never a number)
        assert "1.2/1.4kW" in row and not re.search(r"[0-9./]…", row), row
    app, source = make_app(frames)
    async with app.run_test(size=(200, 50)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("v")  # amd (vendors cycle alphabetically): its first device selected
        await pilot.pause()
        assert app.selected == app.shown[0].key and app.shown[0].device.id == amd
        text = screen_text(app)
        amd_rows = lines_with(text, "MI300X")
        assert "1010.0 MiB/192.0 GiB" in amd_rows[0]
        assert any("1010.0 MiB " in line.partition("│")[2] for line in text.splitlines())
        await pilot.press("escape")
        furiosa = lines_with(screen_text(app), "Furiosa RNGD")
        assert furiosa and all("/N/A W" in line for line in furiosa)


async def test_the_totals_tables_never_cut_memory_power_or_energy(snaps: list[Snapshot]) -> None:
    """The groups view's energy column was 9 cells: after a long day a group's ``512.00 kWh``
    read ``512.00 k…``; its memory column 19: ``1010.0 MiB/192.0 GiB`` lost its unit."""
    amd = {d.id for d in snaps[0].devices if d.vendor == "amd"}
    furiosa = {d.id for d in snaps[0].devices if d.vendor == "furiosa"}
    assert len(furiosa) == 4  # 4 x 48 GiB

    def change(i: int, dev: DeviceSample) -> DeviceSample:
        if dev.id in furiosa:
            return replace(dev, memory_used_bytes=1010 * MiB // 4)
        if dev.id in amd:  # a counter that grew by 64 kWh a device and a second
            return replace(dev, energy_joules=1e9 + i * 2.3e8)
        return dev
    frames = [replace(s, devices=tuple(change(i, d) for d in s.devices)) for i, s in enumerate(snaps)]
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        text = screen_text(app)
        assert "1010.0 MiB/192.0 GiB" in lines_with(text, " furiosa ")[0]
        row = lines_with(text, " amd ")[0]
        assert "kWh" in row and "…" not in row
        # The two tables stay aligned: the power column starts at the same place in both.
        header = lines_with(text, "power / limit")
        assert len(header) == 2 and header[0].index("power") == header[1].index("power")


async def test_a_group_s_memory_adds_like_with_like(snaps: list[Snapshot]) -> None:
    """A device whose memory in use is unknown (thrown away as implausible, not reported) added
    its total but not its use: the group read less memory in use (and a lower share) than it
    had. Only devices that report both are summed, and the cell says how many."""
    amd = next(d.id for d in snaps[0].devices if d.vendor == "amd")
    frames = tweak(snaps, lambda d: replace(d, memory_used_bytes=None) if d.id == amd else d)
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        rows = app.query_one("#vendor-table").row_keys  # type: ignore[attr-defined]
        assert "vendor:amd" in rows
        text = screen_text(app)
        row = lines_with(text, " amd ")[0]
        assert "(7 of 8)" in row
        last = frames[-1].devices
        seven = [d for d in last if d.vendor == "amd" and d.id != amd]
        from allsmi.schema.formatting import human_bytes
        used = sum(d.memory_used_bytes or 0 for d in seven)
        total = sum(d.memory_total_bytes or 0 for d in seven)
        assert f"{human_bytes(used)}/{human_bytes(total)} (7 of 8)" in row


async def test_energy_since_start_counts_at_a_one_minute_interval() -> None:
    """The energy meter bridged at most 30 s between samples whatever the interval: at
    ``--interval 60`` (or a Prometheus scraped each minute) energy since start stayed N/A
    forever, while the exporter and the idle view bridge three intervals."""
    snaps = simulated_snapshots(4, step=60.0)
    source = StaticSource.of(snaps, clock=frozen, interval=60.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        training = lines_with(screen_text(app), "training")[0]
        assert " Wh" in training and "N/A" not in training.split("W ")[-1]
        assert all(app.energy.joules(r.key) is not None for r in app.shown
                   if r.device.power_watts is not None)


def test_a_compact_power_cell_keeps_its_unit_beside_a_number() -> None:
    from allsmi.dashboard.tables.cells import COMPACT_POWER_WIDTH, power_text
    cases = {(1203.0, 1400.0): "1.2/1.4kW", (1203.0, None): "1.2kW/N/A",
             (None, 1400.0): "N/A/1400W", (93.0, None): "93/N/A W", (520.0, 700.0): "520/700W"}
    for (power, limit), want in cases.items():
        text = power_text(power, limit, compact=True)
        assert text == want and len(text) <= COMPACT_POWER_WIDTH, (power, limit, text)


async def test_energy_and_idle_time_count_under_an_accelerated_simulation() -> None:
    """``ALLSMI_SIMULATE_SPEED=60 allsmi --simulate mixed``: snapshots 120 s of simulated time
    apart at a 2 s interval. The app bridges gaps of that speed (as record and serve do), so
    energy since start and idle time are counted; at speed 1 the same gaps are outages."""
    snaps = simulated_snapshots(4, step=120.0, attribution=True)
    for speed, counted in ((60.0, True), (1.0, False)):
        source = StaticSource.of(snaps, clock=frozen, interval=2.0)
        app = DashboardApp(source, config=groups_config(), clock=frozen, speed=speed)
        async with app.run_test(size=(160, 40)) as pilot:
            await play_all(app, source, pilot)
            powered = [r for r in app.shown if r.device.power_watts is not None]
            assert powered and all((app.energy.joules(r.key) is not None) is counted
                                   for r in powered), speed
            assert bool(app.idle.rows()) is counted, speed
