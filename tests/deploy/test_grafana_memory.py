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
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..conftest import require_tool
from .support import DEPLOY, RULES, panels

FLEET = DEPLOY / "grafana" / "allsmi-fleet.json"
MEMORY = "Memory by group and vendor"
COVERAGE = "Memory and the devices it counts, by group and vendor"
#: Grafana's variables at "All".
ALL = {"$resource_group": ".*", "$vendor": ".*", "$host": ".*"}


def _series(metric: str, instance: str, uuid: str, group: str, vendor: str, value: float,
            parent: str | None = None) -> dict[str, str]:
    labels = f'instance="{instance}", uuid="{uuid}", vendor="{vendor}", resource_group="{group}"'
    if parent is not None:
        labels += f', parent_uuid="{parent}"'
    return {"series": f"{metric}{{{labels}}}", "values": f"{value:g}x10"}


INPUT = [
    # training / nvidia: GPU-aa reports both, GPU-bb its total only, MIG-a1 is part of GPU-aa
    _series("allsmi_device_info", "gpu01:9477", "GPU-aa", "training", "nvidia", 1, ""),
    _series("allsmi_device_info", "gpu01:9477", "GPU-bb", "training", "nvidia", 1, ""),
    _series("allsmi_device_info", "gpu01:9477", "MIG-a1", "training", "nvidia", 1, "GPU-aa"),
    _series("allsmi_device_memory_used_bytes", "gpu01:9477", "GPU-aa", "training", "nvidia", 1000),
    _series("allsmi_device_memory_total_bytes", "gpu01:9477", "GPU-aa", "training", "nvidia", 4000),
    _series("allsmi_device_memory_total_bytes", "gpu01:9477", "GPU-bb", "training", "nvidia", 4000),
    _series("allsmi_device_memory_used_bytes", "gpu01:9477", "MIG-a1", "training", "nvidia", 500),
    _series("allsmi_device_memory_total_bytes", "gpu01:9477", "MIG-a1", "training", "nvidia", 2000),
    # inference / amd: one device, its memory in use unknown
    _series("allsmi_device_info", "gpu02:9477", "amd-cc", "inference", "amd", 1, ""),
    _series("allsmi_device_memory_total_bytes", "gpu02:9477", "amd-cc", "inference", "amd", 8000),
]
TRAINING = 'resource_group="training", vendor="nvidia"'
INFERENCE = 'resource_group="inference", vendor="amd"'


def _targets(title: str) -> list[dict[str, Any]]:
    found = [p for p in panels(json.loads(FLEET.read_text())) if p["title"] == title]
    assert len(found) == 1, f"the fleet dashboard has no panel {title!r}"
    return found[0]["targets"]


def _expr(target: dict[str, Any]) -> str:
    expr = target["expr"]
    for name, value in ALL.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def _promtool(tmp_path: Path, cases: list[tuple[str, dict[str, float]]]) -> str:
    """Evaluate each (expression, {labels: value}) with promtool at 5 minutes (plus 0, which
    drops a recorded series' name: the values and the other labels are compared); its output
    (asserting success)."""
    tests = [{"expr": f"({expr}) + 0", "eval_time": "5m",
              "exp_samples": [{"labels": f"{{{labels}}}", "value": value}
                              for labels, value in expected.items()]}
             for expr, expected in cases]
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
           "tests": [{"name": "memory like with like", "interval": "1m", "input_series": INPUT,
                      "promql_expr_test": tests}]}
    path = tmp_path / "memory.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run([require_tool("promtool", "prometheus"), "test", "rules", path.name],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    return out


def test_memory_used_and_total_count_the_same_devices(tmp_path: Path) -> None:
    """The panel's total is GPU-aa's 4000 beside its 1000 in use, not 8000 with GPU-bb's total
    whose use is unknown; the partition is part of its board; a group none of whose devices
    reports its use has neither figure (never 0 used of 8000). The capacity rule still counts
    every device's total (8000), which is why the panel does not compare use with it."""
    by_legend = {t["legendFormat"].split("}} ")[-1].split(" ")[0]: _expr(t)
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
    used, total, counted, devices = (_expr(t) for t in targets)
    _promtool(tmp_path, [
        (used, {TRAINING: 1000}),
        (total, {TRAINING: 4000}),
        (counted, {TRAINING: 1, INFERENCE: 0}),
        (devices, {TRAINING: 2, INFERENCE: 1}),
    ])
    panel = next(p for p in panels(json.loads(FLEET.read_text())) if p["title"] == COVERAGE)
    names = next(t["options"]["renameByName"] for t in panel["transformations"]
                 if t["id"] == "organize")
    assert names["Value #C"] == "devices reporting memory in use"
    assert names["Value #D"] == "physical devices"
    overrides = {o["matcher"]["options"]: o["properties"] for o in panel["fieldConfig"]["overrides"]}
    assert overrides == {name: [{"id": "unit", "value": "none"}]
                         for name in ("devices reporting memory in use", "physical devices")}
