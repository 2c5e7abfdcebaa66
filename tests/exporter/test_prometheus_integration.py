"""A real Prometheus scraping ``allsmi serve``: per-group billing queries give plausible numbers.

Starts ``/usr/bin/prometheus`` (Debian package ``prometheus``) on loopback with
a 1 s scrape interval, lets it scrape for ~25 s, then asks its HTTP API the
queries ``docs/exporter.md`` recommends for billing.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pytest

from ..prometheus_server import running_prometheus
from .server import fetch, run_serve

pytestmark = [pytest.mark.integration]

CONFIG = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"

[[rules]]
resource_group = "inference"
vendor = "amd"

[groups.training.labels]
team = "ml-research"

[groups.inference.labels]
team = "serving"
"""
WINDOW = 20
SCRAPED_FOR = 26.0


def query(base: str, promql: str) -> dict[str, float]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    resp = fetch(url)
    assert resp.status == 200, resp.text
    data = json.loads(resp.body)
    assert data["status"] == "success", data
    out = {}
    for item in data["data"]["result"]:
        key = item["metric"].get("resource_group", "")
        out[key] = float(item["value"][1])
    return out


@pytest.mark.long(27)
def test_per_group_billing_through_prometheus(tmp_path: Path) -> None:
    config = tmp_path / "allsmi.toml"
    config.write_text(CONFIG)
    exporter = run_serve(["--simulate", "mixed", "--interval", "1", "--processes",
                          "--config", str(config)], tmp=tmp_path)
    try:
        exporter.wait_ready()
        with running_prometheus(tmp_path, [f"127.0.0.1:{exporter.port}"]) as base:
            time.sleep(SCRAPED_FOR)
            _check_groups(base)
    finally:
        exporter.stop()


def _check_groups(base: str) -> None:
    """Per-group energy, busy, allocated and observed time, as Prometheus computes them."""
    up = query(base, 'up{job="allsmi"}')
    assert up == {"": 1.0}, up

    energy = query(base, f"sum by (resource_group) "
                         f"(increase(allsmi_device_energy_joules_total[{WINDOW}s]))")
    power = query(base, f"sum by (resource_group) "
                        f"(avg_over_time(allsmi_device_power_watts[{WINDOW}s]))")
    assert set(energy) == {"training", "inference", "npu"}
    for group in energy:
        # increase() extrapolates to the window edges: energy ~ mean power x window
        assert energy[group] == pytest.approx(power[group] * WINDOW, rel=0.25), group
    # 8 H100 + 8 MI300X idle at >= 72 W and >= 140 W; no board is counted twice
    assert power["training"] > 8 * 72 and power["inference"] > 8 * 140
    boards = query(base, "count by (resource_group) (allsmi_device_power_watts)")
    assert boards == {"training": 8.0, "inference": 17.0, "npu": 11.0}

    busy = query(base, f"sum by (resource_group) "
                       f"(increase(allsmi_device_busy_seconds_total[{WINDOW}s]))")
    util = query(base, f"sum by (resource_group) "
                       f"(avg_over_time(allsmi_device_utilization_ratio[{WINDOW}s]))")
    assert set(busy) == {"training", "inference", "npu"}
    assert sum(busy.values()) > 3 * WINDOW  # the simulated node is busy, not idle
    for group in busy:
        assert busy[group] == pytest.approx(util[group] * WINDOW, rel=0.25, abs=1.0), group

    allocated = query(base, f"sum by (resource_group) "
                            f"(increase(allsmi_device_allocated_seconds_total[{WINDOW}s]))")
    # allocated: a process or a workload (the simulated pods and jobs) on the device
    in_use = query(base, f"sum by (resource_group) (avg_over_time(((count by (uuid) "
                         f"(allsmi_process_memory_bytes or allsmi_device_workload_info) > bool 0) "
                         f"* on (uuid) "
                         f"group_left (resource_group) allsmi_device_info)[{WINDOW}s:1s]))")
    assert set(allocated) == {"training", "inference", "npu"}
    assert sum(allocated.values()) > 3 * WINDOW
    for group in allocated:
        assert allocated[group] == pytest.approx(in_use.get(group, 0.0) * WINDOW,
                                                 rel=0.25, abs=1.5), group

    observed = query(base, f"sum by (resource_group) "
                           f"(increase(allsmi_device_observed_seconds_total[{WINDOW}s]))")
    # 8 H100 + 3 MIG instances (the config's rule); 8 MI300X (the config's rule) + 8 Gaudi + the
    # Intel Flex GPU, and 10 NPUs + the Trainium, Ascend and TPU (the mixed scenario's default
    # rules), each observed the whole window
    expected = {"training": 11, "inference": 17, "npu": 13}
    for group, devices in expected.items():
        assert observed[group] == pytest.approx(devices * WINDOW, rel=0.15), group

    teams = query(base, 'count by (resource_group) (allsmi_resource_group_info{team!=""})')
    assert set(teams) == {"training", "inference", "npu"}  # npu: the scenario's own group
