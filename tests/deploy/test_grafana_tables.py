"""The dashboards' tables and holder views say what they show, in its unit, for every holder.

A table of several queries names each column and gives it its own unit (Grafana would show
"Value #A", "Value #B" in the panel's one unit: memory in bytes as a bare number, a ratio as
0.53); device-hours are a quantity, never one of Grafana's time units (whose "h" shows 200
device-hours as "1.19 week"). The namespace, job or user views, evaluated by the real promtool,
give the processes of a host without Kubernetes or Slurm a row per user instead of summing
them into one nameless row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .support import DASHBOARDS, DEPLOY, at_all, panel_targets, panels, promtool_eval, table_columns

#: Each table and its columns' Grafana units, written out independently of the build.
COLUMNS = {
    ("allsmi-fleet.json", "Memory and the devices it counts, by group and vendor"): {
        "memory in use": "bytes", "memory in total": "bytes",
        "devices reporting memory in use": "none", "physical devices": "none"},
    ("allsmi-fleet.json", "Power, utilization and the devices they count, by group and vendor"): {
        "power": "watt", "devices reporting power": "none", "utilization": "percentunit",
        "devices and partitions reporting utilization": "none", "physical devices": "none",
        "partitions": "none"},
    ("allsmi-fleet.json", "Device-hours per holder and waiting reason in the time range"): {
        "device-hours by reason": "suffix:device-h", "active device-hours": "suffix:device-h"},
    ("allsmi-fleet.json", "Device-hours and energy per namespace, job or user in the time range"): {
        "allocated device-hours": "suffix:device-h", "used device-hours": "suffix:device-h",
        "energy": "kwatth"},
    ("allsmi-fleet.json", "Billing exports"): {
        "success": "none", "since the last run": "s", "coverage": "percentunit"},
    ("allsmi-fleet.json", "Hosts"): {
        "devices": "none", "utilization": "percentunit", "power": "watt", "memory used": "bytes"},
    ("allsmi-fleet.json", "Devices"): {
        "utilization": "percentunit", "memory used": "bytes", "temperature": "celsius",
        "power": "watt"},
    ("allsmi-node.json", "Processes"): {"device memory": "bytes"},
}
#: Grafana's time units: they scale hours into days, weeks and years.
TIME_UNITS = {"ns", "µs", "ms", "s", "m", "h", "d", "dtdurationms", "dtdurations", "dthms"}


def _dashboard(name: str) -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / name).read_text())


def test_table_columns_are_named_in_their_own_units() -> None:
    for (name, title), expected in COLUMNS.items():
        panel = next(p for p in panels(_dashboard(name))
                     if p["title"] == title and p["type"] == "table")
        assert table_columns(panel) == expected, title
    for name in DASHBOARDS:
        for panel in panels(_dashboard(name)):
            if panel["type"] == "table" and len(panel["targets"]) > 1:
                columns = table_columns(panel)
                assert not any(c.startswith("Value") for c in columns), \
                    f"{panel['title']}: unnamed columns {columns}"


def test_device_hours_are_a_quantity_not_a_duration() -> None:
    found = 0
    for name in DASHBOARDS:
        for panel in panels(_dashboard(name)):
            if panel["type"] == "row":
                continue
            targets = panel["targets"]
            units = list(table_columns(panel).values()) if panel["type"] == "table" else \
                [panel["fieldConfig"]["defaults"]["unit"]] * len(targets)
            for target, unit in zip(targets, units):
                if "seconds_total" in target["expr"] and target["expr"].endswith("/ 3600"):
                    found += 1
                    assert unit not in TIME_UNITS and "device-h" in unit, \
                        f"{panel['title']}: {target['expr']} in {unit}"
    assert found >= 4


# --- the namespace, job or user views, evaluated -------------------------------------------

HOLDER = "allsmi_holder_{}_total"
COUNTERS = ("allocated_seconds", "used_seconds", "energy_joules")


def _holder_series(namespace: str = "", pod: str = "", job_id: str = "", user: str = "",
                   uuid: str = "GPU-aa") -> list[dict[str, str]]:
    """One holder on one device for an hour: 1 device-second per second and 100 W."""
    labels = (f'instance="gpu01:9477", uuid="{uuid}", resource_group="training", '
              f'namespace="{namespace}", pod="{pod}", job_id="{job_id}", user="{user}", '
              f'method="equal"')
    per_minute = {"allocated_seconds": 60, "used_seconds": 60, "energy_joules": 6000}
    return [{"series": f"{HOLDER.format(c)}{{{labels}}}", "values": f"0+{per_minute[c]}x60"}
            for c in COUNTERS]


#: A pod whose processes run as two users, a Slurm job, and two users' processes on a host
#: without either (each its own device).
HOLDERS = (_holder_series(namespace="ml", pod="train-0", user="alice", uuid="GPU-aa")
           + _holder_series(namespace="ml", pod="train-0", user="bob", uuid="GPU-aa")
           + _holder_series(job_id="4242", user="carol", uuid="GPU-bb")
           + _holder_series(user="dave", uuid="GPU-cc")
           + _holder_series(user="erin", uuid="GPU-dd"))


def test_processes_outside_kubernetes_and_slurm_are_shown_per_user(tmp_path: Path) -> None:
    """The pod is one row of its namespace (its two users' parts added), the job one row of its
    id, and dave and erin a row each, not one row without a name holding both; each row says
    which kind of owner it is (a namespace and a user may share a name)."""
    table = panel_targets("allsmi-fleet.json",
                          "Device-hours and energy per namespace, job or user in the time range")
    rate = panel_targets("allsmi-fleet.json",
                         "Used device-seconds per second by namespace, job or user")
    builtins = {"$__range": "1h", "$__rate_interval": "5m"}
    rows = ('owner="namespace/ml"', 'owner="job/4242"', 'owner="user/dave"', 'owner="user/erin"')
    hours = dict(zip(rows, (2, 1, 1, 1)))
    kwh = dict(zip(rows, (0.2, 0.1, 0.1, 0.1)))  # 100 W for an hour, per holder
    allocated, used, energy = (at_all(t["expr"], builtins) for t in table)
    promtool_eval(tmp_path, HOLDERS, [
        (allocated, hours), (used, hours), (energy, kwh),
        (at_all(rate[0]["expr"], builtins), hours),  # 1 device-second per second per holder
    ], eval_time="1h")
    assert rate[0]["legendFormat"] == "{{owner}}"
