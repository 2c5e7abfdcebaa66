"""The fleet dashboard's memory panels add like with like, evaluated by the real promtool.

Memory in use next to memory in total must count the same devices: a device whose memory in
use is unknown adds nothing to either, and the dashboard says how many devices it counts.
Each panel query, as committed in deploy/grafana/allsmi-fleet.json, is evaluated by
``promtool test rules`` with deploy/prometheus/allsmi-rules.yml loaded, over a fleet where
one device reports its total but not its use, one partition reports both (part of its
board's memory) and one group has no device reporting its use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .support import (DEPLOY, at_all, device_series, panel_targets, panels, promtool_eval,
                      table_columns)

FLEET = DEPLOY / "grafana" / "allsmi-fleet.json"
MEMORY = "Memory by group and vendor"
COVERAGE = "Memory and the devices it counts, by group and vendor"


INPUT = [
    # training / nvidia: GPU-aa reports both, GPU-bb its total only, MIG-a1 is part of GPU-aa
    device_series("allsmi_device_info", "gpu01:9477", "GPU-aa", "training", "nvidia", 1, ""),
    device_series("allsmi_device_info", "gpu01:9477", "GPU-bb", "training", "nvidia", 1, ""),
    device_series("allsmi_device_info", "gpu01:9477", "MIG-a1", "training", "nvidia", 1, "GPU-aa"),
    device_series("allsmi_device_memory_used_bytes", "gpu01:9477", "GPU-aa", "training", "nvidia", 1000),
    device_series("allsmi_device_memory_total_bytes", "gpu01:9477", "GPU-aa", "training", "nvidia", 4000),
    device_series("allsmi_device_memory_total_bytes", "gpu01:9477", "GPU-bb", "training", "nvidia", 4000),
    device_series("allsmi_device_memory_used_bytes", "gpu01:9477", "MIG-a1", "training", "nvidia", 500),
    device_series("allsmi_device_memory_total_bytes", "gpu01:9477", "MIG-a1", "training", "nvidia", 2000),
    # inference / amd: one device, its memory in use unknown
    device_series("allsmi_device_info", "gpu02:9477", "amd-cc", "inference", "amd", 1, ""),
    device_series("allsmi_device_memory_total_bytes", "gpu02:9477", "amd-cc", "inference", "amd", 8000),
]
TRAINING = 'resource_group="training", vendor="nvidia"'
INFERENCE = 'resource_group="inference", vendor="amd"'


def _targets(title: str) -> list[dict[str, Any]]:
    return panel_targets("allsmi-fleet.json", title)


def _promtool(tmp_path: Path, cases: list[tuple[str, dict[str, float]]]) -> str:
    return promtool_eval(tmp_path, INPUT, cases)


def test_memory_used_and_total_count_the_same_devices(tmp_path: Path) -> None:
    """The panel's total is GPU-aa's 4000 beside its 1000 in use, not 8000 with GPU-bb's total
    whose use is unknown; the partition is part of its board; a group none of whose devices
    reports its use has neither figure (never 0 used of 8000). The capacity rule still counts
    every device's total (8000), which is why the panel does not compare use with it."""
    by_legend = {t["legendFormat"].split("}} ")[-1].split(" ")[0]: at_all(t["expr"])
                 for t in _targets(MEMORY)}
    assert set(by_legend) == {"used", "total"}, by_legend
    _promtool(tmp_path, [
        (by_legend["used"], {TRAINING: 1000}),
        (by_legend["total"], {TRAINING: 4000}),
        ("resource_group_vendor:allsmi_device_memory_total_bytes:sum",
         {TRAINING: 8000, INFERENCE: 8000}),
    ])


def test_the_dashboard_says_how_many_devices_the_memory_counts(tmp_path: Path) -> None:
    """The table beside it: 1 of 2 devices of training/nvidia report memory in use, 0 of 1 of
    inference/amd (a count of 0, known), with the same like-with-like sums."""
    targets = _targets(COVERAGE)
    assert [t["refId"] for t in targets] == ["A", "B", "C", "D"]
    assert all(t["format"] == "table" and t["instant"] for t in targets)
    used, total, counted, devices = (at_all(t["expr"]) for t in targets)
    _promtool(tmp_path, [
        (used, {TRAINING: 1000}),
        (total, {TRAINING: 4000}),
        (counted, {TRAINING: 1, INFERENCE: 0}),
        (devices, {TRAINING: 2, INFERENCE: 1}),
    ])
    panel = next(p for p in panels(json.loads(FLEET.read_text())) if p["title"] == COVERAGE)
    assert table_columns(panel) == {
        "memory in use": "bytes", "memory in total": "bytes",
        "devices reporting memory in use": "none", "physical devices": "none"}
