"""The Prometheus fleet source: exporter series in, one snapshot per instance out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from allsmi.dashboard.app import DashboardApp
from allsmi.dashboard.prometheus import (PrometheusError, PrometheusSource, build_snapshots, make_query,
                                         selector)
from allsmi.exporter.exposition import render_snapshot
from allsmi.schema import Snapshot

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
        for field in ("utilization_percent", "temperature_celsius", "power_watts", "clock_mhz", "fan_percent"):
            expected = getattr(want, field)
            if expected is None:
                assert getattr(dev, field) is None, field  # unknown stays unknown, never 0
            else:
                assert getattr(dev, field) == pytest.approx(expected), field
        assert sorted(p.pid for p in dev.processes) == sorted(p.pid for p in want.processes
                                                               if p.memory_bytes is not None)


def test_source_marks_down_targets_and_backs_off_when_prometheus_fails(sim_snapshots: list[Snapshot]) -> None:
    snap = sim_snapshots[-1]
    at = snap.unix_time
    now = [50.0]
    fail = [False]

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        if fail[0]:
            raise PrometheusError("cannot reach Prometheus: connection refused")
        if promql == selector():
            return at, as_query_result(render_snapshot(snap), "a:9477", at)
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
            assert sum(1 for d in devices if d.parent is None) == 34
            assert sum(1 for d in devices if d.parent is not None) == 3
            h100 = next(d for d in devices if d.name == "NVIDIA H100 80GB HBM3")
            assert h100.memory_total_bytes == 85520809984 and h100.power_limit_watts == 700.0
            assert h100.health == "ok"
        await pilot.press("g")
        assert app.view == "groups"


def _safe(query: Any) -> list[dict[str, Any]]:
    try:
        return query('allsmi_device_info', 5.0)[1]
    except PrometheusError:
        return []


def test_make_query_rejects_bad_urls_and_reports_unreachable() -> None:
    with pytest.raises(ValueError):
        make_query("prometheus:9090")
    query = make_query(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(PrometheusError, match="cannot reach"):
        query("up", 2.0)
