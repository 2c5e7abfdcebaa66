"""Visual regressions of the main screens (``pytest --snapshot-update`` after reviewing changes).

Every screen is built from simulated snapshots at a fixed time, a fixed
hostname and a frozen clock, so the pictures depend on the code only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .conftest import frozen, make_app, play_all
from .fixtures import groups_config

pytestmark = pytest.mark.timeout(120)


def _played(app: DashboardApp, source: StaticSource, *keys: str) -> Any:
    async def run_before(pilot: Any) -> None:
        await play_all(app, source, pilot)
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
    return run_before


def test_node_view_80x24(snap_compare: Any, sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_played(app, source))


def test_node_view_200x60(snap_compare: Any, sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    assert snap_compare(app, terminal_size=(200, 60), run_before=_played(app, source, "down", "down"))


def test_node_view_sorted_by_utilization_npu_selected(snap_compare: Any,
                                                       sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    assert snap_compare(app, terminal_size=(120, 40),
                        run_before=_played(app, source, "v", "v", "u", "down"))


def test_group_view(snap_compare: Any, sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    assert snap_compare(app, terminal_size=(120, 30), run_before=_played(app, source, "g"))


def test_help_screen(snap_compare: Any, sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    assert snap_compare(app, terminal_size=(100, 40), run_before=_played(app, source, "question_mark"))


def test_cluster_view(snap_compare: Any, sim_snapshots: list[Snapshot]) -> None:
    def host(snap: Snapshot, name: str) -> Snapshot:
        return replace(snap, host=replace(snap.host, hostname=name))
    frames = [{"10.0.0.1:9477": host(s, "node-a"), "10.0.0.2:9477": host(s, "node-b"),
               "10.0.0.3:9477": "connection refused"} for s in sim_snapshots]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    assert snap_compare(app, terminal_size=(160, 40), run_before=_played(app, source))
