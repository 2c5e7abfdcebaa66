"""The cluster view's hosts table (Pilot), and the plain table printed instead of it off a terminal.

The hosts follow the sort keys the view's help lists: ``u`` said ``sort utilization ▼`` on the
state line and sorted the groups and vendors below, while the hosts, the view's own table, stayed
in the order they were given. The plain table counts a host's utilization as the screen does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.views.hosts import plain_hosts
from allsmi.schema import Snapshot

from .conftest import frozen, screen_text
from .fixtures import groups_config, simulated_snapshots

pytestmark = pytest.mark.timeout(120)


def _node(snap: Snapshot, name: str, factor: float, celsius: float) -> Snapshot:
    devices = tuple(replace(d, temperature_celsius=celsius,
                            utilization_percent=None if d.utilization_percent is None
                            else d.utilization_percent * factor) for d in snap.devices)
    return replace(snap, host=replace(snap.host, hostname=name), devices=devices)


def _hosts_on_screen(app: DashboardApp) -> list[str]:
    """The hostnames of the hosts table's rows, top to bottom, as drawn."""
    names = ("node-low", "node-high", "node-mid", "node-never")
    rows = []
    for line in screen_text(app).splitlines():
        found = [n for n in names if n in line]
        if found and (" ok " in line or " down " in line):
            rows.append(found[0])
    return rows


@pytest.fixture(scope="module")
def fleet() -> list[dict[str, Snapshot | str]]:
    snap = simulated_snapshots(1, step=1.0)[0]
    return [{"10.0.0.1:9477": _node(snap, "node-low", 0.1, 30.0),
             "node-never:9477": "connection refused",  # never heard from: nothing known
             "10.0.0.3:9477": _node(snap, "node-high", 1.0, 80.0),
             "10.0.0.4:9477": _node(snap, "node-mid", 0.5, 50.0)}]


async def test_the_sort_keys_order_the_hosts_unknown_last(fleet: list[dict[str, Snapshot | str]]) -> None:
    source = StaticSource(fleet, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert app.view == "cluster"
        given = ["node-low", "node-never", "node-high", "node-mid"]
        assert _hosts_on_screen(app) == given
        await pilot.press("u")
        await pilot.pause()
        assert _hosts_on_screen(app) == ["node-high", "node-mid", "node-low", "node-never"]
        await pilot.press("u")  # again: ascending, the unknown still last
        await pilot.pause()
        assert _hosts_on_screen(app) == ["node-low", "node-mid", "node-high", "node-never"]
        await pilot.press("t")
        await pilot.pause()
        assert _hosts_on_screen(app) == ["node-high", "node-mid", "node-low", "node-never"]
        await pilot.press("n")
        await pilot.pause()
        assert _hosts_on_screen(app) == given
        await pilot.press("r")
        await pilot.pause()
        assert _hosts_on_screen(app) == given[::-1]


async def test_a_click_on_a_hosts_header_sorts_by_it(fleet: list[dict[str, Snapshot | str]]) -> None:
    source = StaticSource(fleet, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.query_one("#host-table")
        x = 0
        for column in table.ordered_columns:  # type: ignore[attr-defined]
            if column.key.value == "util":
                break
            x += column.get_render_width(table)
        await pilot.click("#host-table", offset=(x + 1, 0))
        await pilot.pause()
        assert app.sort_key == "utilization" and app.descending
        assert _hosts_on_screen(app) == ["node-high", "node-mid", "node-low", "node-never"]


async def test_the_plain_table_shows_the_utilization_the_screen_shows() -> None:
    """Partitions that report their own utilization (AMD compute partitions) count in the
    screen's mean, as in every total of the dashboard; the plain table (a pipe, ``TERM=dumb``)
    averaged the physical devices only: 47 % there against 44 % on screen for one node."""
    snap = simulated_snapshots(1, step=1.0)[0]
    devices = tuple(replace(d, utilization_percent=10.0) if d.parent is not None else d
                    for d in snap.devices)
    source = StaticSource([{"10.0.0.1:9477": replace(snap, devices=devices)}], cluster=True,
                          clock=frozen, interval=1.0)
    plain = plain_hosts(source.hosts(), frozen()).splitlines()[1].split()
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        row = next(line for line in screen_text(app).splitlines() if " ok " in line).split()
    assert plain[2] == row[4] == "38+3p"  # devices
    assert plain[3] == row[5], (plain, row)  # util
