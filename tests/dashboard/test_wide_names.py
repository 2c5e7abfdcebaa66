"""Names of wide characters (CJK, emoji: two cells each) and long warnings in the cluster view:
every cut is counted in cells and marked with an ellipsis."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from rich.cells import cell_len

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.dashboard.tables.process_table import DEVICE_MAX_WIDTH
from allsmi.dashboard.views.hosts import NAME_MAX_WIDTH
from allsmi.schema import BackendStatus, Snapshot

from .conftest import frozen

pytestmark = pytest.mark.timeout(120)

#: 40 characters, 80 cells.
WIDE_KEY = "计算节点" * 9 + ":9477"
WIDE_NAME = "训练集群🚀" * 8
#: A backend's error message: the row shows the first 200 characters of its warnings.
LONG_MESSAGE = "NVML: " + "the driver answered with an error the library does not know; " * 5 + "END"


async def test_wide_host_names_and_long_warnings_are_cut_in_cells_with_an_ellipsis(
        sim_snapshots: list[Snapshot]) -> None:
    wide = replace(sim_snapshots[0], host=replace(sim_snapshots[0].host, hostname=WIDE_NAME))
    failing = replace(sim_snapshots[1], host=replace(sim_snapshots[1].host, hostname="node-b"),
                      backends=(BackendStatus(name="nvidia", status="error", message=LONG_MESSAGE),))
    source = StaticSource([{WIDE_KEY: wide, "10.0.0.2:9477": failing}], cluster=True, clock=frozen)
    app = DashboardApp(source, clock=frozen)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        hosts = app.query_one("#host-table", DiffTable)
        host, *_, name, problem = (c.plain for c in hosts.get_row(f"host:{WIDE_KEY}"))
        # the host and hostname columns are capped at 32 cells, not 32 characters (64 cells)
        assert cell_len(host) <= NAME_MAX_WIDTH and host.endswith("…"), host
        assert cell_len(name) <= NAME_MAX_WIDTH and name.endswith("…"), name
        said = hosts.get_row("host:10.0.0.2:9477")[-1].plain.replace("\n", "")
        assert "NVML: the driver" in said and "END" not in said and said.endswith("…"), said
        # the processes panel's device column: at most 40 cells, the device's name whole
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        table = app.process_table
        device = dict((cid, width) for cid, _, width in table.columns)["device"]
        assert 0 < device <= DEVICE_MAX_WIDTH, table.columns
        labels = [table.get_row(key)[4].plain for key in table.row_keys]
        wide_labels = [label for label in labels if label.startswith("计算") or label.startswith("训练")]
        assert wide_labels and all(cell_len(label) <= DEVICE_MAX_WIDTH and "…:" in label
                                   for label in wide_labels), wide_labels
        assert all(re.search(r"…:[a-z]+ [0-9/]+$", label) for label in wide_labels), wide_labels
