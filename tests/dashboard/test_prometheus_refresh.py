"""What one refresh of the fleet view asks a Prometheus-compatible store: only what the screen
needs. Recorded totals replace the per-host device count, the slow same-device join is asked
once a minute in the background (its age on screen), and the shipped rules equal the live
queries they replace."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources.prometheus import SHARED_DEVICES, STATIC_SECONDS, PrometheusSource, make_query
from allsmi.dashboard.sources.promsummary import GROUPINGS, RECORDED, fleet_totals, recorded_totals, summary_queries

from ..prometheus_server import running_prometheus
from .conftest import screen_text
from .hostile import Handler, Server, json_body
from .test_cluster import ServeProcess, wait_until

pytestmark = pytest.mark.timeout(120)

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "allsmi-rules.yml"


class RecordingPrometheus:
    """A store over loopback with the fleet-view rules loaded: ``instances`` hosts of
    ``devices`` devices, two of them scraped twice; every query asked is kept."""

    def __init__(self, instances: int = 120, devices: int = 37) -> None:
        self.instances = [f"node{i:03d}:9477" for i in range(instances)]
        self.devices = devices
        self.queries: list[str] = []
        self.server = Server(self.respond)
        self.url = self.server.url

    def answer(self, promql: str) -> list[dict[str, Any]]:
        def sample(labels: dict[str, str], value: float) -> dict[str, Any]:
            return {"metric": labels, "value": [1000.0, repr(value)]}
        if promql.startswith('{__name__=~"') and RECORDED["instance"] in promql:
            out = [sample({"__name__": RECORDED["instance"], "instance": i, "allsmi_total": name}, value)
                   for i in self.instances for name, value in (("devices", self.devices - 3),
                                                               ("partitions", 3), ("power_watts", 700.0))]
            for by, key in (("resource_group", "train"), ("vendor", "nvidia")):
                out.append(sample({"__name__": RECORDED[by], by: key, "allsmi_total": "devices"},
                                  len(self.instances) * (self.devices - 3)))
                out += [sample({"__name__": RECORDED[by], by: key, "instance": i, "allsmi_total": "hosts"}, 1)
                        for i in self.instances]
            return out
        if promql.startswith("timestamp("):
            return [sample({"instance": i}, 999.0) for i in self.instances]
        if promql == SHARED_DEVICES:
            return [sample({"instance": i}, 2) for i in self.instances[:2]]
        return []

    def respond(self, handler: Handler) -> None:
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        self.queries.append(promql)
        doc = {"status": "success", "data": {"resultType": "vector", "result": self.answer(promql)}}
        handler.send_body(json_body(doc))

    def close(self) -> None:
        self.server.close()


def _over_every_device(promql: str) -> bool:
    """A query that reads every device series of the fleet (no instance matcher)."""
    return "allsmi_device_" in promql and "instance=~" not in promql and ":allsmi_devices:totals" not in promql


def test_a_large_fleet_with_the_rules_reads_no_device_series_on_a_refresh() -> None:
    store = RecordingPrometheus()
    now = [100.0]
    source = PrometheusSource(store.url, interval=1.0, timeout=10.0, clock=lambda: now[0])
    try:
        source.refresh(lambda: False)
        first = list(store.queries)
        assert SHARED_DEVICES in first  # the first refresh waits for the same-device check
        assert not [q for q in first if _over_every_device(q) and q != SHARED_DEVICES], first
        assert not source.detailed
        hosts = {h.key: h for h in source.hosts()}
        assert len(hosts) == 120 and all(h.error is None for h in hosts.values())
        assert hosts["node005:9477"].summary.devices == 34
        assert hosts["node000:9477"].shared == 2 and hosts["node005:9477"].shared == 0
        assert source.totals("vendor")["nvidia"].devices == 120 * 34
        assert source.shared_age == 0.0
        for _ in range(5):  # later refreshes inside the slow schedule: no device series at all
            store.queries.clear()
            now[0] += 5.0
            source.refresh(lambda: False)
            assert not [q for q in store.queries if _over_every_device(q)], store.queries
            assert {h.key: h.shared for h in source.hosts()}["node000:9477"] == 2  # kept
        assert source.shared_age == pytest.approx(25.0)
        assert source.note is not None and "same-device check 25 s old" in source.note
        store.queries.clear()
        now[0] = 100.0 + STATIC_SECONDS
        source.refresh(lambda: False)  # due again: asked in the background
        assert wait_until(lambda: SHARED_DEVICES in store.queries, 10)
        source.focus(["node007:9477"])
        store.queries.clear()
        now[0] += 5.0

        def refreshed_with_the_new_answer() -> bool:
            # the background answer is taken by the first refresh after it has landed (the
            # store has seen the query; its answer may still be on its way)
            source.refresh(lambda: False)
            return source.shared_age == pytest.approx(5.0)
        assert wait_until(refreshed_with_the_new_answer, 10), source.shared_age
        assert any('instance=~"node007:9477"' in q for q in store.queries), store.queries
    finally:
        source.close()
        store.close()


async def test_the_fleet_view_says_how_old_the_same_device_check_is() -> None:
    store = RecordingPrometheus(instances=3)
    now = [100.0]
    source = PrometheusSource(store.url, interval=1.0, timeout=10.0, clock=lambda: now[0], device_budget=10)
    try:
        source.refresh(lambda: False)
        now[0] += 30.0
        source.refresh(lambda: False)
        app = DashboardApp(source)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            await pilot.press("c")
            await pilot.pause()
            text = screen_text(app)
            assert "same-device check 30 s old" in text, text
            assert "counted twice" in text, text
    finally:
        source.close()
        store.close()


@pytest.mark.integration
def test_the_shipped_rules_give_the_live_totals(tmp_path: Path) -> None:
    """With deploy/prometheus/allsmi-rules.yml loaded, the recorded totals (summed from the
    finest level) equal the live queries, for every grouping; each node scraped by two jobs
    (each series twice) still counts each device once."""
    from allsmi.dashboard.sources.cluster import fetch_snapshot, parse_endpoint
    servers = [ServeProcess(), ServeProcess()]
    try:
        for server in servers:
            assert wait_until(server.ready, 30)
        snap = fetch_snapshot(parse_endpoint(servers[0].url), 5.0)
        whole = sum(1 for d in snap.devices if d.parent is None)
        with running_prometheus(tmp_path, [f"127.0.0.1:{s.port}" for s in servers], rule_files=[RULES],
                                jobs=2) as url:
            query = make_query(url)
            assert wait_until(lambda: len(recorded_totals(query, 5.0).get("instance", {})) == 2, 60, 0.5)
            assert wait_until(lambda: len(query("count by (job, instance) (allsmi_device_info)", 5.0)[1])
                              == 4, 60, 0.5)  # each node's series twice, once per job
            stable = ("devices", "partitions", "lost", "memory_total_bytes", "power_limit_watts",
                      "utilization_count", "power_count", "power_limited_count")
            for _ in range(30):  # the nodes change every half second: ask until one instant agrees
                recorded = recorded_totals(query, 5.0)
                live = {by: fleet_totals(query, by, 5.0) for by in GROUPINGS}
                same = all(set(recorded.get(by, {})) == set(live[by]) and all(
                    getattr(recorded[by][k], n) == getattr(live[by][k], n) for k in live[by] for n in stable)
                    and all(recorded[by][k].hosts == live[by][k].hosts for k in live[by])
                    for by in GROUPINGS)
                if same:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"recorded {recorded} != live {live}")
            assert len(recorded["vendor"]) >= 2 and all(len(t.hosts) == 2 for t in recorded["vendor"].values())
            assert {t.devices for t in recorded["instance"].values()} == {whole}, recorded
            assert set(summary_queries("instance")) >= set(stable)
    finally:
        for server in servers:
            server.stop()


class NodePrometheus:
    """A store over loopback holding one node's exporter series (``--processes``): the answer
    to each device query is the series it selects."""

    def __init__(self, snapshot: Any, instance: str = "gpu1:9477") -> None:
        from allsmi.exporter.exposition import render_snapshot

        from .test_prometheus import as_query_result
        self.at = snapshot.unix_time
        self.series = as_query_result(render_snapshot(snapshot, processes=True), instance, self.at)
        self.instance = instance
        self.server = Server(self.respond)
        self.url = self.server.url

    def answer(self, promql: str) -> list[dict[str, Any]]:
        import re as _re
        if promql.startswith("count by (instance)"):
            count = sum(1 for s in self.series if s["metric"]["__name__"] == "allsmi_device_info")
            return [{"metric": {"instance": self.instance}, "value": [self.at, str(count)]}]
        names = _re.search(r'__name__=~?"([^"]+)"', promql)
        if promql.startswith("{") or promql.startswith("max by"):
            wanted = set(names.group(1).split("|")) if names else set()
            return [s for s in self.series if s["metric"]["__name__"] in wanted]
        return []

    def respond(self, handler: Handler) -> None:
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        doc = {"status": "success", "data": {"resultType": "vector", "result": self.answer(promql)}}
        handler.send_body(json_body(doc))

    def close(self) -> None:
        self.server.close()


async def test_the_cluster_processes_panel_shows_each_process_utilization_from_prometheus(
        sim_snapshots: list[Any]) -> None:
    from allsmi.dashboard.tables.process_table import ProcessTable
    from allsmi.schema.formatting import percent
    UTIL = [c for c, _, _ in ProcessTable.COLUMNS].index("util")
    snap = sim_snapshots[-1]
    busy = [p for d in snap.devices for p in d.processes or () if p.utilization_percent is not None
            and p.memory_bytes is not None]
    assert busy, "the simulated node has processes with a utilization"
    store = NodePrometheus(snap)
    source = PrometheusSource(store.url, interval=1.0, timeout=10.0)
    try:
        app = DashboardApp(source)
        async with app.run_test(size=(200, 50)) as pilot:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not (app.hosts and app.hosts[0].snapshot is not None):
                app.poll()
                await pilot.pause(0.1)
            await pilot.press("enter")  # the host's devices
            await pilot.press("p")  # every device's processes
            await pilot.pause()
            table = app.process_table
            assert table.row_count > 0
            cells = {k.rsplit("\x1e", 1)[1]: [str(c) for c in table.get_row(k)]
                     for k in table.row_keys}
            for proc in busy[:5]:
                row = cells.get(str(proc.pid))
                if row is not None:  # among the biggest shown
                    assert row[UTIL] == percent(proc.utilization_percent), (proc.pid, row)
            assert any(cells.get(str(p.pid), [""] * 5)[UTIL] == percent(p.utilization_percent) for p in busy)
    finally:
        source.close()
        store.close()
