"""A host never heard from has devices nobody counted: every count on screen says unknown, never
0. ``allsmi view --prometheus http://127.0.0.1:1`` (a Prometheus that is down) said
``0 devices`` on the summary line while the hosts row said ``N/A``; the idle view said that no
device was idle while it had no sample at all."""

from __future__ import annotations

import re

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.sources.cluster import ClusterSource
from allsmi.dashboard.sources.prometheus import PrometheusSource

from .conftest import frozen, screen_text
from .fixtures import simulated_snapshots


def _summary(app: DashboardApp) -> str:
    return screen_text(app).splitlines()[0]


async def test_a_prometheus_that_is_down_counts_no_device_as_zero() -> None:
    source = PrometheusSource("http://127.0.0.1:1", interval=1.0, timeout=1.0)
    source.refresh(lambda: False)  # refused: nothing heard, ever
    app = DashboardApp(source)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        line = _summary(app)
        assert "hosts 0/1 up" in line and "devices N/A" in line, line
        assert not re.search(r"\b0 devices?\b", screen_text(app)), screen_text(app)
        for key in ("d", "g", "i"):
            await pilot.press(key)
            await pilot.pause()
            text = screen_text(app)
            assert "devices N/A" in text.splitlines()[0] and not re.search(r"\b0 devices?\b", text), text
        # the idle view has no sample: it says it waits, not that nothing is idle
        text = screen_text(app)
        assert "waiting for samples" in text and "No allocated-but-idle" not in text, text
        assert "No data yet from http://127.0.0.1:1" in text, text
        for width in (80, 60):  # the short form says it too
            await pilot.resize_terminal(width, 24)
            await pilot.pause()
            assert "devices N/A" in _summary(app), _summary(app)


async def test_hosts_that_never_answered_are_not_counted_as_empty() -> None:
    """``--hosts`` with every node refused before its first answer: ``devices N/A``; with one
    node up and one never heard from, the count is the heard node's and says that one host is
    missing from it (``+N/A on 1 host``)."""
    source = ClusterSource(["127.0.0.1:1"], interval=1.0, timeout=1.0)
    source.refresh(lambda: False)
    app = DashboardApp(source)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert "devices N/A" in _summary(app) and " 0 devices" not in _summary(app), _summary(app)

    snaps = simulated_snapshots(2, step=1.0)
    frames = [{"node-a:9477": s, "node-b:9477": "connection refused"} for s in snaps]
    mixed = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(mixed, clock=frozen)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        line = _summary(app)
        assert "hosts 1/2 up" in line and "38 devices + 3 partitions (+N/A on 1 host)" in line, line
        await pilot.press("i")
        await pilot.pause()
        assert "No data yet from node-b:9477" in screen_text(app)


async def test_a_local_node_before_its_first_sample_says_unknown() -> None:
    """The local node before its first collection cycle: ``devices N/A``, not ``0 devices``."""
    app = DashboardApp(StaticSource([{"node-a": "starting"}], clock=frozen), clock=frozen)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        line = _summary(app)
        assert "age waiting" in line and "devices N/A" in line and "0 device" not in line, line
