"""The fleet view fed odd answers: one device in two series, NaN sums, partial answers with
``warnings``, instance labels with control characters."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from allsmi.dashboard.sources.prometheus import PrometheusSource, build_snapshots, make_query
from allsmi.dashboard.sources.promquery import instance_matcher
from allsmi.dashboard.sources.promsummary import totals_from
from allsmi.dashboard.state.totals import totals_by
from allsmi.dashboard.state.model import refs_of
from allsmi.exporter.exposition import render_snapshot
from allsmi.schema import Snapshot

from ..conftest import run_allsmi
from ..prometheus_server import running_prometheus
from .hostile import Handler, Server, json_body
from .test_prometheus import as_query_result

pytestmark = pytest.mark.timeout(120)


def test_one_device_in_two_series_is_one_device(sim_snapshots: list[Snapshot]) -> None:
    """The same instance scraped by two jobs (or HA replicas merged without dedup): every series
    twice, differing in ``job``. Each device is shown, and counted, once."""
    snap = sim_snapshots[-1]
    at = snap.unix_time
    once = as_query_result(render_snapshot(snap, processes=True), "a:9477", at)
    twice = once + [{**s, "metric": {**s["metric"], "job": "replica-b"}} for s in once]
    built = build_snapshots(twice, at)["a:9477"]
    assert sorted(d.id for d in built.devices) == sorted(d.id for d in snap.devices)
    want = build_snapshots(once, at)["a:9477"]
    for dev in built.devices:
        assert dev.workloads == want.device(dev.id).workloads  # type: ignore[union-attr]
    (got,) = totals_by(refs_of("a:9477", built), lambda r: "all")
    assert got.devices == len([d for d in snap.devices if d.parent is None])


def _total(name: str, value: str, instance: str = "a:1") -> dict[str, Any]:
    return {"metric": {"instance": instance, "allsmi_total": name}, "value": [1.0, value]}


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-1"])
def test_a_sum_that_is_not_a_number_makes_its_mean_unknown_not_zero(bad: str) -> None:
    """A device reporting NaN makes Prometheus' ``sum`` NaN while ``count`` still counts it:
    the host's utilization, power and memory are unknown (N/A), never 0 % or 0 W."""
    got = totals_from([_total("devices", "2"), _total("utilization_sum", bad),
                       _total("utilization_count", "2"), _total("power_watts", bad),
                       _total("power_count", "2"), _total("power_limited_watts", "300"),
                       _total("power_limit_watts", bad), _total("power_limited_count", "2"),
                       _total("memory_used_bytes", bad), _total("memory_total_bytes", "1024"),
                       _total("memory_count", "2")], "instance")["a:1"]
    assert got.devices == 2
    assert got.utilization_percent is None
    assert got.power_watts is None and got.power_count == 0
    assert got.power_limit_watts is None and got.power_limited_watts is None and got.power_limited_count == 0
    assert got.memory_percent is None and got.memory_count == 0


def _partial_prometheus(at: float) -> Server:
    """A store answering every query in part: the series of one node, and a warning."""
    def respond(handler: Handler) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)["query"][0]
        result: list[dict[str, Any]] = []
        if query.startswith("timestamp("):
            result = [{"metric": {"instance": "a:9477"}, "value": [at, str(at - 1)]}]
        elif query.startswith("count by (instance)") and "and on (uuid)" not in query:  # not the same-device check
            result = [{"metric": {"instance": "a:9477"}, "value": [at, "1"]}]
        elif "allsmi_device_info|" in query:
            result = [{"metric": {"__name__": "allsmi_device_info", "instance": "a:9477",
                                  "uuid": "GPU-1", "vendor": "nvidia", "index": "0"}, "value": [at, "1"]}]
        handler.send_body(json_body({"status": "success", "warnings": [
            "partial response: store 10.0.0.9:10901 \x1b]0;pwned\x07 unavailable"],
            "data": {"resultType": "vector", "result": result}}))
    return Server(respond)


def test_a_partial_answer_is_said_on_screen_and_in_the_plain_table() -> None:
    """Thanos, Mimir or VictoriaMetrics answer 200 with ``warnings`` when some stores did not
    answer: the numbers shown may lack hosts, and the screen says so (not silently whole)."""
    server = _partial_prometheus(1.7e9)
    try:
        source = PrometheusSource(server.url, interval=1.0, query=make_query(server.url))
        source.refresh(lambda: False)
        (host,) = source.hosts()
        assert host.error is None and host.snapshot is not None and len(host.snapshot.devices) == 1
        assert source.note is not None and "answered in part" in source.note
        assert "store 10.0.0.9:10901" in source.note
        plain = run_allsmi("view", "--prometheus", server.url, env={"ALLSMI_CONFIG": "/dev/null"})
        assert "a:9477" in plain.stdout
        assert "answered in part" in plain.stderr and "store 10.0.0.9:10901" in plain.stderr
        assert "\x1b" not in plain.stderr and "\x07" not in plain.stderr
    finally:
        server.close()


ODD = ["a b:9477", "n\nl:9477", "bell\x07:9477", 'q"z:9477', "\u00e9t\u00e9:9477", "tab\t:9477",
       "back\\slash:9477", "dots.and[brackets]:1"]


def test_instance_matcher_matches_odd_label_values_in_real_prometheus(tmp_path: Path) -> None:
    """The focus and exclusion queries name instances in a regex: a label value with a newline,
    a control character, a quote or a backslash must match itself (before, a newline made
    every refresh fail with a PromQL parse error while that host was opened)."""
    with running_prometheus(tmp_path, ["127.0.0.1:1"]) as url:
        for value in ODD:
            literal = json.dumps(value)  # a PromQL string is Go-quoted: JSON's escapes are valid
            matcher = instance_matcher([value, "other:1"])[len("instance=~"):]
            promql = (f'label_replace(label_replace(vector(1), "instance", {literal}, "", ""), '
                      f'"hit", "yes", "instance", {matcher})')
            with urllib.request.urlopen(f"{url}/api/v1/query?"
                                        + urllib.parse.urlencode({"query": promql}), timeout=10) as r:
                doc = json.load(r)
            assert doc["status"] == "success", (value, doc)
            (sample,) = doc["data"]["result"]
            assert sample["metric"].get("hit") == "yes", (value, matcher)
            assert sample["metric"]["instance"] == value


def test_the_plain_table_shows_a_large_fleets_hosts_by_their_totals() -> None:
    """A host of a fleet too large to list its devices has totals, not a snapshot: the plain
    table (a pipe, ``TERM=dumb``) says what the screen says, never "wait" and 0 devices."""
    from allsmi.dashboard.sources import HostState
    from allsmi.dashboard.state.totals import Totals
    from allsmi.dashboard.views.hosts import plain_hosts

    host = HostState(key="node-7:9477", name="node-7:9477", snapshot=None, received=None,
                     summary=Totals("node-7:9477", devices=8, partitions=3,
                                    utilization_sum=300.0, utilization_count=8))
    table = plain_hosts([host], 0.0).splitlines()
    assert table[1].split()[:4] == ["node-7:9477", "ok", "8+3p", "38%"], table
