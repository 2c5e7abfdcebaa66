"""The dashboard driven through Pilot, where what it counts, finds and focuses must survive
what the operator does: a pause, a filter on what the screen shows, a hidden panel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .conftest import frozen, make_app, play_all
from .fixtures import groups_config, simulated_snapshots

pytestmark = pytest.mark.timeout(120)


async def test_a_pause_longer_than_the_gap_loses_no_energy_or_idle_time() -> None:
    """Space freezes the screen, not the counting: energy and idle time since start after a
    pause of 40 s (longer than the 30 s a gap between two samples may bridge) are those of a
    run never paused."""
    snaps = simulated_snapshots(50, step=1.0, attribution=True)

    async def counted(pause: bool) -> tuple[dict[str, float | None], list[tuple[str, float]]]:
        app, source = make_app(snaps)
        async with app.run_test(size=(100, 30)) as pilot:
            for i in range(len(snaps) - 1):
                if pause and i in (5, 45):
                    await pilot.press("space")
                    assert app.paused == (i == 5)
                source.advance()
                app.poll()
            await pilot.pause()
            assert not app.paused
            energy = {ref.key: app.energy.joules(ref.key) for ref in app.all_refs()}
            idle = sorted((row.key, round(row.idle_seconds, 6)) for row in app.idle.rows())
        return energy, idle

    live, paused = await counted(False), await counted(True)
    assert any(v for v in live[0].values()) and live[1]
    assert paused == live


async def test_the_text_filter_finds_the_names_on_screen_and_v_f_keep_them(
        sim_snapshots: list[Snapshot]) -> None:
    """The filter finds a device by the host name its row shows (the hostname a node reports,
    not the address it is read at), and `v`/`f` after a filter on a device's name
    (``nvidia 7/1``) cycle through the vendors and groups of what that filter shows."""
    a = replace(sim_snapshots[0], host=replace(sim_snapshots[0].host, hostname="node-a"))
    b = replace(sim_snapshots[1], host=replace(sim_snapshots[1].host, hostname="gpu-node-b"))
    source = StaticSource([{"10.0.0.1:9477": a, "10.0.0.2:9477": b}], cluster=True, clock=frozen)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("slash", *"gpu-node-b", "enter")
        assert app.shown and {r.host for r in app.shown} == {"10.0.0.2:9477"}
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("slash", *"nvidia 7/1", "enter")
        shown = {r.key for r in app.shown}
        assert shown and {r.device.vendor for r in app.shown} == {"nvidia"}
        await pilot.press("v")
        assert app.filter.vendor == "nvidia" and {r.key for r in app.shown} == shown
        await pilot.press("f")
        assert app.filter.group is not None and {r.key for r in app.shown} <= shown


@pytest.mark.parametrize("hide", ["z", "resize"])
async def test_hiding_the_panel_that_has_the_focus_gives_the_keys_back_to_the_table(
        sim_snapshots: list[Snapshot], hide: str) -> None:
    """Tab into the processes panel, then `z` (or a terminal under 20 lines) hides it: the
    arrows move through the devices again, as the help says, instead of going nowhere."""
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(100, 30)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("tab", "tab")
        assert app.focused is app.process_table
        if hide == "z":
            await pilot.press("z")
        else:
            await pilot.resize_terminal(100, 15)
        await pilot.pause()
        assert app.query_one("#bottom").has_class("-hidden")
        before = app.device_table.cursor_row
        await pilot.press("down", "down")
        assert app.device_table.cursor_row == before + 2
