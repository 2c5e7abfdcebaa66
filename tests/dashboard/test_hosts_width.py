"""The cluster view's hosts table fits the terminal: at 80x24 no sideways scrolling, no number
cut, the least needed columns left out and named on the state line, and room for its rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.views.groups import PAD
from allsmi.dashboard.views.hosts import host_layout
from allsmi.dashboard.views.render import Palette
from allsmi.dashboard.sources import HostState
from allsmi.schema import Snapshot

from .conftest import FROZEN_NOW, frozen, play_all, screen_text
from .fixtures import groups_config

pytestmark = pytest.mark.timeout(120)

NUMBERS = ("age", "devices", "util", "power", "memory")


def _cluster(snapshots: list[Snapshot], count: int = 6) -> tuple[DashboardApp, StaticSource]:
    """``count`` hosts, the third one down."""
    def host(snap: Snapshot, name: str) -> Snapshot:
        return replace(snap, host=replace(snap.host, hostname=name))
    frames = [{f"10.0.0.{i}:9477": "connection refused" if i == 3 else host(s, f"node-{i}")
               for i in range(1, count + 1)} for s in snapshots]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    return DashboardApp(source, config=groups_config(), clock=frozen), source


async def test_the_hosts_table_fits_80x24_cuts_no_number_and_shows_its_hosts(
        sim_snapshots: list[Snapshot]) -> None:
    app, source = _cluster(sim_snapshots)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        table = app.query_one("#host-table", DiffTable)
        assert table.max_scroll_x == 0, (table.virtual_size, table.size)  # no sideways scrolling
        lines = screen_text(app).splitlines()
        columns = [str(c.key.value) for c in table.columns.values()]
        assert {"host", "state", "util", "power", "memory"} <= set(columns), columns
        header = lines[table.region.y]
        assert len(header.rstrip()) <= 80 and "memory" in header, header
        top = table.region.y + 1
        shown = table.row_keys[:table.region.height - 1]
        assert len(shown) >= 6, (shown, table.region)  # every host (the old layout: 2)
        for i, key in enumerate(shown):
            line = lines[top + i]
            for column, cell in zip(columns, table.get_row(key)):
                text = str(cell).strip()
                if column in NUMBERS:
                    assert text and "\u2026" not in text and text in line, (key, column, text, line)
        state = lines[1]
        assert "hidden: hostname, problem" in state, state
        # the vendors scroll instead of being cut off below the screen
        vendors = app.query_one("#cluster-vendor-table", DiffTable)
        assert vendors.max_scroll_y > 0 and vendors.max_scroll_x == 0
        assert vendors.region.bottom <= 23


def test_a_long_host_is_cut_before_a_column_of_numbers_goes(sim_snapshots: list[Snapshot]) -> None:
    key = "gpu-node-a.rack-17.datacenter-west.example.org:9477"
    hosts = [HostState(key, "gpu-a", sim_snapshots[-1], FROZEN_NOW)]
    big = {key: Totals(key, devices=4096, partitions=512, utilization_sum=50.0, utilization_count=1,
                       memory_used_bytes=700 * 2**30, memory_total_bytes=3 * 2**39, memory_count=7,
                       memory_reported=8, power_watts=900.0, power_limit_watts=600.0,
                       power_limited_watts=201.0, power_count=5, power_limited_count=2)}
    layout = host_layout(hosts, big, Palette.from_theme(None, True), FROZEN_NOW, 1.0, 78)
    widths = {cid: w for cid, _, w in layout.columns}
    assert sum(w + PAD for w in widths.values()) <= 78
    assert list(widths)[:2] == ["host", "state"] and "memory" in widths and "power" in widths
    assert 8 <= widths["host"] < 32  # cut (with an ellipsis, by the table), not dropped
    cells = dict(zip(widths, layout.rows[0][1]))
    for cid in NUMBERS:
        if cid in widths:
            assert cells[cid].cell_len <= widths[cid], (cid, str(cells[cid]))
    assert cells["devices"].plain == "4096+512p" if "devices" in widths else "devices" in layout.hidden
    assert layout.hidden[0] == "hostname", layout.hidden
    wide = host_layout(hosts, big, Palette.from_theme(None, True), FROZEN_NOW, 1.0, 300)
    assert not wide.hidden and [c for c, _, _ in wide.columns][-2:] == ["name", "error"]
