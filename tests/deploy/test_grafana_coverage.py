"""The fleet dashboard says how many devices its power and utilization figures count,
evaluated by the real promtool.

As the memory table does ("7 of 8 devices report memory in use"), the table beside the power
and utilization panels gives, per group and vendor, how many devices report power and how many
devices and partitions report utilization beside the physical devices and partitions: a group
with devices none of which reports one counts 0, known, never an empty cell. Each query, as
committed in deploy/grafana/allsmi-fleet.json, is evaluated by ``promtool test rules`` with
deploy/prometheus/allsmi-rules.yml loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from .support import (DEPLOY, at_all, device_series, panel_targets, panels, promtool_eval,
                      table_columns)

FLEET = DEPLOY / "grafana" / "allsmi-fleet.json"
COVERAGE = "Power, utilization and the devices they count, by group and vendor"


INPUT = [
    # training / nvidia: GPU-aa reports power and utilization, GPU-bb utilization only, MIG-a1
    # (a partition of GPU-aa) utilization only: power is a board owner's
    device_series("allsmi_device_info", "gpu01:9477", "GPU-aa", "training", "nvidia", 1, ""),
    device_series("allsmi_device_info", "gpu01:9477", "GPU-bb", "training", "nvidia", 1, ""),
    device_series("allsmi_device_info", "gpu01:9477", "MIG-a1", "training", "nvidia", 1, "GPU-aa"),
    device_series("allsmi_device_power_watts", "gpu01:9477", "GPU-aa", "training", "nvidia", 300),
    device_series("allsmi_device_utilization_ratio", "gpu01:9477", "GPU-aa", "training", "nvidia", 0.75),
    device_series("allsmi_device_utilization_ratio", "gpu01:9477", "GPU-bb", "training", "nvidia", 0.5),
    device_series("allsmi_device_utilization_ratio", "gpu01:9477", "MIG-a1", "training", "nvidia", 0.25),
    # inference / amd: two devices on two hosts, neither reports power or utilization
    device_series("allsmi_device_info", "gpu02:9477", "amd-cc", "inference", "amd", 1, ""),
    device_series("allsmi_device_info", "gpu03:9477", "amd-dd", "inference", "amd", 1, ""),
    device_series("allsmi_device_memory_total_bytes", "gpu02:9477", "amd-cc", "inference", "amd", 8000),
]
TRAINING = 'resource_group="training", vendor="nvidia"'
INFERENCE = 'resource_group="inference", vendor="amd"'


def test_the_dashboard_says_how_many_devices_power_and_utilization_count(tmp_path: Path) -> None:
    """1 of 2 devices of training/nvidia report power (300 W), 3 devices and partitions report
    utilization (a mean of 0.5) beside 2 physical devices and 1 partition; inference/amd has
    neither figure and counts 0 reporting either, 0 partitions, of its 2 devices."""
    targets = panel_targets("allsmi-fleet.json", COVERAGE)
    assert [t["refId"] for t in targets] == ["A", "B", "C", "D", "E", "F"]
    assert all(t["format"] == "table" and t["instant"] for t in targets)
    power, power_count, util, util_count, devices, partitions = (at_all(t["expr"]) for t in targets)
    promtool_eval(tmp_path, INPUT, [
        (power, {TRAINING: 300}),
        (power_count, {TRAINING: 1, INFERENCE: 0}),
        (util, {TRAINING: 0.5}),
        (util_count, {TRAINING: 3, INFERENCE: 0}),
        (devices, {TRAINING: 2, INFERENCE: 2}),
        (partitions, {TRAINING: 1, INFERENCE: 0}),
    ])
    panel = next(p for p in panels(json.loads(FLEET.read_text())) if p["title"] == COVERAGE)
    assert table_columns(panel) == {
        "power": "watt", "devices reporting power": "none", "utilization": "percentunit",
        "devices and partitions reporting utilization": "none", "physical devices": "none",
        "partitions": "none"}
