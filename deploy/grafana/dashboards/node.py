"""The node dashboard (allsmi-node.json): one node's accelerators, processes, workloads and
backends, with one panel per measured field (``allsmi/schema/fields.py``) in its declared unit."""

from __future__ import annotations

from typing import Any

from allsmi.exporter.families import GAUGES
from allsmi.schema.fields import ENERGY_FIELD

from .panels import DEVICE_LEGEND, S, dashboard, panel, row, table, targets
from .units import GRAFANA_UNITS, rate_unit, unit


def _title(field: str, unit_: str) -> str:
    words = field[:-len(unit_) - 1] if field.endswith("_" + unit_.lower()) else field
    return words.replace("_", " ").capitalize()


def node() -> dict[str, Any]:
    sel = S
    panels: list[dict[str, Any]] = [
        row("Node"),
        panel("stat", "Devices", "Physical devices of the node.", "none",
              targets((f'count(allsmi_device_info{{parent_uuid="", {sel}}})', "")), 4, 4),
        panel("stat", "Partitions", "MIG instances, compute partitions and dies.", "none",
              targets((f'count(allsmi_device_info{{parent_uuid!="", {sel}}}) or vector(0)', "")),
              4, 4),
        panel("stat", "Lost devices", "Devices that stopped answering.", "none",
              targets((f"count(allsmi_device_up{{{sel}}} == 0) or vector(0)", "")), 4, 4,
              thresholds=[(1, "red")]),
        panel("stat", "Backends down", "Backends that failed or timed out.", "none",
              targets(('count(allsmi_backend_up{instance=~"$host"} == 0) or vector(0)', "")), 4, 4,
              thresholds=[(1, "red")]),
        panel("stat", "Power", "Board power of the node.", unit("allsmi_device_power_watts"),
              targets((f"sum(allsmi_device_power_watts{{{sel}}})", "")), 4, 4),
        panel("stat", "Last collection", "Seconds since the exporter's last collection cycle.",
              unit("allsmi_last_collect_timestamp_seconds"),
              targets(('time() - allsmi_last_collect_timestamp_seconds{instance=~"$host"}', "")),
              4, 4, thresholds=[(120, "red")]),
        row("Devices"),
        panel("table", "Devices", "Identity of every device and partition (allsmi_device_info).",
              "none", targets((f"allsmi_device_info{{{sel}}}", ""), table=True), 24, 8),
        row("Measurements"),
    ]
    # One panel per measured field (allsmi/schema/fields.py), in the unit of its declaration.
    for family, field, _scale in GAUGES:
        panels.append(panel("timeseries", _title(field, field.rsplit("_", 1)[-1]), family.help,
                            GRAFANA_UNITS[family.unit],
                            targets((f"{family.name}{{{sel}}}", DEVICE_LEGEND)), 12, 8))
    energy = ENERGY_FIELD.metric
    panels += [
        panel("timeseries", "Power from the energy counters", "Rate of "
              f"{energy}: joules per second.", rate_unit(energy),
              targets((f"rate({energy}{{{sel}}}[$__rate_interval])", DEVICE_LEGEND)), 12, 8),
        panel("timeseries", "Busy, allocated and allocated-but-idle time", "Share of time each "
              "device was busy, allocated, and allocated while idle.", "percentunit",
              targets((f"rate(allsmi_device_busy_seconds_total{{{sel}}}[$__rate_interval])",
                       DEVICE_LEGEND + " busy"),
                      (f"rate(allsmi_device_allocated_seconds_total{{{sel}}}[$__rate_interval])",
                       DEVICE_LEGEND + " allocated"),
                      (f"rate(allsmi_device_idle_allocated_seconds_total{{{sel}}}"
                       "[$__rate_interval])", DEVICE_LEGEND + " idle")), 12, 8),
        row("Processes and workloads"),
        table("Processes", "Device memory per process (the exporter needs --processes).",
              [('allsmi_process_memory_bytes{instance=~"$host"}', "device memory",
                unit("allsmi_process_memory_bytes"))], 24, 8),
        panel("table", "Workloads", "Kubernetes pods and Slurm jobs holding each device.",
              "none", targets(('allsmi_device_workload_info{instance=~"$host"}', ""), table=True),
              24, 8),
        row("Backends"),
        panel("timeseries", "Backend up", "1 when the backend answered its last cycle.", "none",
              targets(('allsmi_backend_up{instance=~"$host"}', "{{backend}}")), 12, 8),
        panel("timeseries", "Collection time per backend", "Seconds per cycle.",
              unit("allsmi_backend_collect_duration_seconds"),
              targets(('allsmi_backend_collect_duration_seconds{instance=~"$host"}',
                       "{{backend}}")), 12, 8),
    ]
    return dashboard("allsmi-node", "allsmi node", "One node's accelerators, processes, "
                     "workloads and backends (allsmi serve).", panels, False,
                     [{"title": "allsmi fleet", "type": "link", "url": "/d/allsmi-fleet/allsmi-fleet"}])
