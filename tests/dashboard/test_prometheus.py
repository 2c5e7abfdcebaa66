"""The Prometheus fleet source: exporter series in, one snapshot per instance out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.state.model import refs_of
from allsmi.dashboard.state.totals import totals_by
from allsmi.dashboard.sources.prometheus import (PrometheusError, PrometheusSource, build_snapshots, device_queries,
                                         make_query, selector)
from allsmi.dashboard.sources.promsummary import FINE, FINE_BY, RECORDED, combined_query, derived_query, recording_rules
from allsmi.exporter.exposition import render_snapshot
from allsmi.schema import PROCESS_ACTIVITY, Snapshot

from ..prometheus_server import free_port, running_prometheus
from .test_cluster import ServeProcess, wait_until

pytestmark = pytest.mark.timeout(120)


def as_query_result(text: str, instance: str, at: float) -> list[dict[str, Any]]:
    """What Prometheus' /api/v1/query returns for these series, scraped as ``instance``."""
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {**sample.labels, "__name__": sample.name, "instance": instance, "job": "allsmi"}
            out.append({"metric": labels, "value": [at, repr(float(sample.value))]})
    return out


def test_series_become_the_snapshot_they_were_exported_from(sim_snapshots: list[Snapshot]) -> None:
    snap = sim_snapshots[-1]
    at = snap.unix_time + 0.5
    series = as_query_result(render_snapshot(snap, processes=True), "node-a:9477", at)
    series += as_query_result(render_snapshot(sim_snapshots[0]), "node-b:9477", at)
    built = build_snapshots(series, at, {"node-a:9477": snap.unix_time})
    assert set(built) == {"node-a:9477", "node-b:9477"}
    got = built["node-a:9477"]
    assert got.unix_time == pytest.approx(snap.unix_time)
    assert len(got.devices) == len(snap.devices)
    for want in snap.devices:
        dev = got.device(want.id)
        assert dev is not None, want.id
        assert (dev.vendor, dev.index, dev.name, dev.parent, dev.resource_group, dev.kind) == \
            (want.vendor, want.index, want.name, want.parent, want.resource_group, want.kind)
        assert dev.health == want.health
        assert dev.labels == want.labels
        for field in ("memory_used_bytes", "memory_total_bytes", "power_limit_watts"):
            assert getattr(dev, field) == getattr(want, field), field
        assert dev.compute_active_source == want.compute_active_source  # what the activity measures
        for field in ("utilization_percent", "temperature_celsius", "power_watts", "clock_mhz", "fan_percent",
                      "compute_active_percent"):
            expected = getattr(want, field)
            if expected is None:
                assert getattr(dev, field) is None, field  # unknown stays unknown, never 0
            else:
                assert getattr(dev, field) == pytest.approx(expected), field
        # A process is in Prometheus through its memory or its activity gauges (--processes).
        published = [p for p in want.processes if p.memory_bytes is not None
                     or any(getattr(p, name) is not None for name in PROCESS_ACTIVITY)]
        assert sorted(p.pid for p in dev.processes) == sorted(p.pid for p in published)
        by_pid = {p.pid: p for p in dev.processes}
        for proc in published:  # the per-process activity comes back as the percent it was
            for name in PROCESS_ACTIVITY:
                expected = getattr(proc, name)
                value = getattr(by_pid[proc.pid], name)
                assert (value is None) if expected is None else value == pytest.approx(expected), (proc.pid, name)
    assert any(p.utilization_percent is not None for d in got.devices for p in d.processes)


def test_source_marks_down_targets_and_backs_off_when_prometheus_fails(sim_snapshots: list[Snapshot]) -> None:
    snap = sim_snapshots[-1]
    at = snap.unix_time
    now = [50.0]
    fail = [False]

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        if fail[0]:
            raise PrometheusError("cannot reach Prometheus: connection refused")
        if promql == device_queries()[0]:
            return at, as_query_result(render_snapshot(snap), "a:9477", at)
        if promql.startswith("count by (instance)"):
            return at, [{"metric": {"instance": "a:9477"}, "value": [at, str(len(snap.devices))]}]
        if promql in device_queries():
            return at, []
        if promql.startswith("timestamp("):
            return at, [{"metric": {"instance": "a:9477"}, "value": [at, str(at - 3)]}]
        return at, [{"metric": {"instance": "a:9477", "job": "allsmi"}, "value": [at, "1"]},
                    {"metric": {"instance": "b:9477", "job": "allsmi"}, "value": [at, "0"]}]

    source = PrometheusSource("http://127.0.0.1:9", interval=2.0, clock=lambda: now[0], query=query)
    (placeholder,) = source.hosts()
    assert placeholder.snapshot is None and placeholder.error is None
    source.refresh(lambda: False)
    (host,) = source.hosts()
    assert host.key == "a:9477" and host.error is None
    assert host.age(now[0]) == pytest.approx(3.0)  # Prometheus' scrape time, not the query time
    fail[0] = True
    source.refresh(lambda: False)
    (host,) = source.hosts()
    assert "connection refused" in (host.error or "") and host.snapshot is not None
    assert host.retry_at == pytest.approx(52.0)
    source.refresh(lambda: False)  # backing off: not asked again yet
    now[0] = 52.0
    source.refresh(lambda: False)
    assert source.hosts()[0].retry_at == pytest.approx(56.0)
    fail[0] = False
    now[0] = 56.0
    source.refresh(lambda: False)
    assert source.hosts()[0].error is None


@pytest.fixture
def prometheus_over_two_nodes(tmp_path: Path) -> Iterator[str]:
    servers = [ServeProcess(), ServeProcess()]
    try:
        for server in servers:
            assert wait_until(server.ready, 30)
        with running_prometheus(tmp_path, [f"127.0.0.1:{s.port}" for s in servers]) as url:
            yield url
    finally:
        for server in servers:
            server.stop()


@pytest.mark.integration
async def test_fleet_view_from_a_real_prometheus(prometheus_over_two_nodes: str) -> None:
    query = make_query(prometheus_over_two_nodes)
    assert wait_until(lambda: len({s["metric"]["instance"] for s in _safe(query)}) == 2, 40, 0.5)
    app = DashboardApp(PrometheusSource(prometheus_over_two_nodes, interval=1.0, timeout=5.0))
    async with app.run_test(size=(160, 45)) as pilot:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                len(app.hosts) == 2 and all(h.snapshot is not None for h in app.hosts)):
            app.poll()
            await pilot.pause(0.2)
        assert len(app.hosts) == 2, [h.key for h in app.hosts]
        for host in app.hosts:
            devices = host.snapshot.devices
            assert sum(1 for d in devices if d.parent is None) == 38
            assert sum(1 for d in devices if d.parent is not None) == 3
            h100 = next(d for d in devices if d.name == "NVIDIA H100 80GB HBM3")
            assert h100.memory_total_bytes == 85520809984 and h100.power_limit_watts == 700.0
            assert h100.health == "ok"
            # the activity keeps what measured it (the series' ``source`` label), as on the node
            active = [d for d in devices if d.compute_active_percent is not None]
            expected = {"nvidia": "sm_active", "amd": "gfx_busy"}
            assert active and all(d.compute_active_source is not None and d.compute_active_source
                                  == expected.get(d.vendor, d.compute_active_source) for d in active), \
                [(d.vendor, d.compute_active_source) for d in active]
        await pilot.press("d")
        await pilot.resize_terminal(220, 45)  # wide enough for the activity column beside the host
        await pilot.pause()
        key = next(r.key for r in app.shown if r.device.vendor == "amd"
                   and r.device.compute_active_percent is not None)
        assert str(app.device_table.get_cell(key, "active")).endswith("% gfx")
        await pilot.press("g")
        assert app.view == "groups"


@pytest.mark.integration
def test_prometheus_totals_match_the_dashboards_own_totals(prometheus_over_two_nodes: str,
                                                            tmp_path: Path) -> None:
    """The totals Prometheus computes for a large fleet equal those the dashboard computes from
    every device (same rules: physical devices once, partitions apart, board power once)."""
    query = make_query(prometheus_over_two_nodes)
    assert wait_until(lambda: len({s["metric"]["instance"] for s in _safe(query)}) == 2, 40, 0.5)
    # Both views read one instant: Prometheus' evaluation time is fixed by pausing nothing, so
    # ask until two consecutive answers agree (the nodes collect every second).
    full = PrometheusSource(prometheus_over_two_nodes, timeout=10.0)
    lean = PrometheusSource(prometheus_over_two_nodes, timeout=10.0, device_budget=0)
    for _ in range(20):
        full.refresh(lambda: False)
        lean.refresh(lambda: False)
        refs = [r for h in full.hosts() for r in refs_of(h.key, h.snapshot)]
        want = {t.name: t for t in totals_by(refs, lambda r: r.host)}
        got = {h.key: h.summary for h in lean.hosts()}
        if set(want) == set(got) and all(
                (got[k].devices, got[k].partitions, got[k].lost, got[k].memory_total_bytes,
                 got[k].power_limit_watts, got[k].utilization_count)
                == (want[k].devices, want[k].partitions, want[k].lost, want[k].memory_total_bytes,
                    want[k].power_limit_watts, want[k].utilization_count) for k in want):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"totals differ: {got} vs {want}")
    vendors = lean.totals("vendor")
    assert sum(t.devices for t in vendors.values()) == sum(t.devices for t in want.values())
    assert all(len(t.hosts) == 2 for t in vendors.values())
    assert lean.totals("resource_group")
    full.close()
    lean.close()


def test_recording_rules_are_the_live_queries() -> None:
    """One rule reads the devices (the live query at the finest level); the levels the view
    reads are summed from it (their equality with the live queries: test_prometheus_refresh)."""
    rules = {r["record"]: r["expr"] for r in recording_rules()}
    assert rules == {FINE: combined_query(FINE_BY), **{RECORDED[by]: derived_query(by) for by in RECORDED}}


def _safe(query: Any) -> list[dict[str, Any]]:
    try:
        return query('allsmi_device_info', 5.0)[1]
    except PrometheusError:
        return []


def test_a_large_fleet_asks_for_totals_and_only_the_opened_hosts_devices(
        sim_snapshots: list[Snapshot]) -> None:
    snap = sim_snapshots[-1]
    at = snap.unix_time
    hosts = [f"node{i}:9477" for i in range(3)]
    asked: list[str] = []

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        asked.append(promql)
        if promql.startswith("count by (instance)"):
            return at, [{"metric": {"instance": h}, "value": [at, str(len(snap.devices))]} for h in hosts]
        if promql.startswith('{__name__=~"allsmi_device_info|'):
            wanted = [h for h in hosts if h in promql]
            return at, [s for h in wanted for s in as_query_result(render_snapshot(snap), h, at)]
        if promql == combined_query("instance"):
            return at, [{"metric": {"instance": h, "allsmi_total": "devices"}, "value": [at, "34"]}
                        for h in hosts]
        return at, []

    source = PrometheusSource("http://127.0.0.1:9", interval=1.0, query=query, device_budget=10)
    source.refresh(lambda: False)
    assert not source.detailed
    states = source.hosts()
    assert [h.key for h in states] == hosts
    assert all(h.snapshot is None and h.summary.devices == 34 for h in states)
    assert not any(q.startswith("max by (__name__") for q in asked)  # no device values at all
    source.focus(["node1:9477"])
    source.refresh(lambda: False)
    opened = {h.key: h for h in source.hosts()}
    assert opened["node1:9477"].snapshot is not None and opened["node0:9477"].snapshot is None
    assert len(opened["node1:9477"].snapshot.devices) == len(snap.devices)


async def test_the_cluster_view_of_a_large_fleet_shows_totals_and_opens_a_host(
        sim_snapshots: list[Snapshot]) -> None:
    snap = sim_snapshots[-1]
    at = snap.unix_time
    hosts = ["node0:9477", "node1:9477"]

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        if promql.startswith("count by (instance)"):
            return at, [{"metric": {"instance": h}, "value": [at, str(len(snap.devices))]} for h in hosts]
        if promql.startswith('{__name__=~"allsmi_device_info|'):
            return at, [s for h in hosts if h in promql for s in as_query_result(render_snapshot(snap), h, at)]
        if promql == combined_query("instance"):
            return at, [{"metric": {"instance": h, "allsmi_total": name}, "value": [at, value]}
                        for h in hosts for name, value in (("devices", "34"), ("power_watts", "5000"))]
        if promql == combined_query("vendor"):
            return at, [{"metric": {"vendor": "nvidia", "allsmi_total": "devices"}, "value": [at, "16"]}]
        return at, []

    source = PrometheusSource("http://127.0.0.1:9", interval=1.0, query=query, device_budget=10)
    app = DashboardApp(source)
    async with app.run_test(size=(200, 50)) as pilot:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(app.hosts) < 2:
            app.poll()
            await pilot.pause(0.1)
        await pilot.press("c")
        await pilot.pause(0.2)
        table = app.query_one("#host-table")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in rows] == hosts and all(r[1] == "ok" and r[3] == "34" for r in rows), rows
        assert "68 devices" in app._summary_text
        vendor_rows = app.query_one("#cluster-vendor-table")
        assert str(vendor_rows.get_row_at(0)[0]) == "nvidia"
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and app.hosts[1].snapshot is None:
            app.poll()
            await pilot.pause(0.1)
        assert app.hosts[1].snapshot is not None and app.hosts[0].snapshot is None


def test_make_query_rejects_bad_urls_and_reports_unreachable() -> None:
    with pytest.raises(ValueError):
        make_query("prometheus:9090")
    query = make_query(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(PrometheusError, match="cannot reach"):
        query("up", 2.0)
