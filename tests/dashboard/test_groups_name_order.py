"""The groups view sorted by name (``n``) keeps the devices without a group, ``N/A``, last in
both directions, as every unknown value sorts (Pilot): it sat between ``ML`` and ``Prod``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.state.totals import Totals, order_totals

from .conftest import frozen, screen_text
from .fixtures import simulated_snapshots

pytestmark = pytest.mark.timeout(120)


def _groups_on_screen(app: DashboardApp) -> list[str]:
    names = ("ML", "Prod", "N/A")
    lines = screen_text(app).splitlines()
    end = next(i for i, line in enumerate(lines) if line.strip() == "Vendors")
    return [line.split()[0] for line in lines[:end] if line.split() and line.split()[0] in names]


async def test_the_no_group_row_is_last_by_name_both_ways() -> None:
    snap = simulated_snapshots(1, step=1.0)[0]
    group = {"nvidia": "ML", "amd": "Prod"}
    devices = tuple(replace(d, resource_group=group.get(d.vendor)) for d in snap.devices)
    source = StaticSource.of([replace(snap, devices=devices)], clock=frozen, interval=1.0)
    app = DashboardApp(source, clock=frozen)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        assert app.sort_key == "index"
        assert _groups_on_screen(app) == ["ML", "Prod", "N/A"]
        await pilot.press("n")  # the same key again: reversed
        await pilot.pause()
        assert _groups_on_screen(app) == ["Prod", "ML", "N/A"]


def test_a_fleets_unnamed_group_is_last_too() -> None:
    """A Prometheus fleet's totals name the devices without a group by an empty label."""
    rows = [Totals(""), Totals("a"), Totals("b")]
    assert [t.name for t in order_totals(rows, "index", False)] == ["a", "b", ""]
    assert [t.name for t in order_totals(rows, "index", True)] == ["b", "a", ""]
