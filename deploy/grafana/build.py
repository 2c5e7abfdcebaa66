#!/usr/bin/env python3
"""Build the Grafana dashboards from the exporter's declarations.

    python deploy/grafana/build.py           # rewrite allsmi-fleet.json and allsmi-node.json
    python deploy/grafana/build.py --check   # exit 1 if the committed JSON differs

Every unit is derived from the metric's declaration (``allsmi.exporter.families``,
whose device gauges come from ``allsmi.fields.MEASUREMENTS``): a gauge in bytes is
shown in bytes, the rate of a joules counter in watts. The node dashboard has one
panel per measured field, so a field added to ``allsmi/fields.py`` gets its panel
by rebuilding. ``tests/deploy/test_grafana.py`` checks that the committed JSON is
this script's output and runs every panel query against a real Prometheus.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from allsmi.exporter.families import FAMILIES, GAUGES
from allsmi.fields import ENERGY_FIELD

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}

#: Grafana unit of each base unit of the exporter (``Family.unit``).
GRAFANA_UNITS = {"bytes": "bytes", "celsius": "celsius", "watts": "watt", "hertz": "hertz",
                 "ratio": "percentunit", "seconds": "s", "joules": "joule", "": "none"}
#: Grafana unit of the per-second rate of a counter in each base unit: joules per second
#: are watts; seconds per second are a number of devices.
RATE_UNITS = {"joules": "watt", "seconds": "none"}
_FAMILY_UNITS = {f.name: f.unit for f in FAMILIES}
_BASE = ("bytes", "celsius", "watts", "hertz", "ratio", "seconds", "joules")


def base_unit(metric: str) -> str:
    """The declared base unit of ``metric``: an exporter family, or a recording rule
    ``level:allsmi_x:ops`` of one; a metric not (yet) declared takes its name's suffix,
    the exporter's naming rule."""
    name = metric.split(":")[1] if ":" in metric else metric
    for candidate in (name, name + "_total"):
        if candidate in _FAMILY_UNITS:
            return _FAMILY_UNITS[candidate]
    stem = name[:-len("_total")] if name.endswith("_total") else name
    last = stem.rsplit("_", 1)[-1]
    return last if last in _BASE else ""


def unit(metric: str) -> str:
    """Grafana unit of a gauge (or recorded aggregate) of ``metric``."""
    if ":" in metric and metric.rsplit(":", 1)[1].startswith("rate"):
        return rate_unit(metric)
    return GRAFANA_UNITS[base_unit(metric)]


def rate_unit(metric: str) -> str:
    """Grafana unit of the per-second rate of the counter ``metric``."""
    return RATE_UNITS.get(base_unit(metric), "none")


def target(expr: str, legend: str = "", table: bool = False, ref: str = "A") -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "editorMode": "code", "expr": expr, "refId": ref}
    if table:
        out.update(format="table", instant=True, range=False, legendFormat="__auto")
    else:
        out.update(range=True, instant=False, legendFormat=legend or "__auto")
    return out


def targets(*specs: tuple[str, str], table: bool = False) -> list[dict[str, Any]]:
    return [target(expr, legend, table, chr(ord("A") + i)) for i, (expr, legend) in enumerate(specs)]


def panel(kind: str, title: str, description: str, unit_: str, tgts: list[dict[str, Any]],
          w: int, h: int, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind, "title": title, "description": description, "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit_}, "overrides": []},
        "options": {}, "targets": tgts, "gridPos": {"w": w, "h": h}}
    if kind == "timeseries":
        out["fieldConfig"]["defaults"]["custom"] = {"fillOpacity": 10, "showPoints": "never"}
        out["options"] = {"legend": {"displayMode": "table", "placement": "right",
                                     "calcs": ["lastNotNull", "max"]},
                          "tooltip": {"mode": "multi", "sort": "desc"}}
    elif kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                          "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    elif kind == "table":
        out["transformations"] = [{"id": "merge", "options": {}},
                                  {"id": "organize", "options": {"excludeByName": {"Time": True}}}]
        out["options"] = {"showHeader": True, "cellHeight": "sm"}
    elif kind == "bargauge":
        out["options"] = {"displayMode": "gradient", "orientation": "horizontal",
                          "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    if "thresholds" in extra:
        out["fieldConfig"]["defaults"]["thresholds"] = {
            "mode": "absolute", "steps": [{"color": "green", "value": None}] + [
                {"color": color, "value": value} for value, color in extra.pop("thresholds")]}
        out["fieldConfig"]["defaults"]["color"] = {"mode": "thresholds"}
    if "links" in extra:
        out["fieldConfig"]["defaults"]["links"] = extra.pop("links")
    out.update(extra)
    return out


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"w": 24, "h": 1}}


def layout(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Number the panels and place them left to right, top to bottom, on Grafana's 24 columns."""
    x = y = line_h = 0
    for number, item in enumerate(items, 1):
        grid = item["gridPos"]
        if item["type"] == "row" or x + grid["w"] > 24:
            x, y, line_h = 0, y + line_h, 0
        grid.update(x=x, y=y)
        item["id"] = number
        x += grid["w"]
        line_h = max(line_h, grid["h"])
        if item["type"] == "row":
            x, y, line_h = 0, y + grid["h"], 0
    return items


def query_variable(name: str, label: str, query: str, *, all_: bool = True) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query, "query": {"query": query, "refId": f"allsmi-{name}"},
            "refresh": 2, "sort": 1, "regex": "", "hide": 0, "multi": all_, "includeAll": all_,
            "allValue": ".*" if all_ else None, "current": {}, "options": []}


def variables(host_all: bool) -> list[dict[str, Any]]:
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "refresh": 1, "regex": "", "hide": 0, "multi": False, "includeAll": False,
         "current": {}, "options": []},
        query_variable("resource_group", "Resource group",
                       "label_values(allsmi_device_info, resource_group)"),
        query_variable("vendor", "Vendor",
                       'label_values(allsmi_device_info{resource_group=~"$resource_group"}, vendor)'),
        query_variable("host", "Host", 'label_values(allsmi_device_info{resource_group=~'
                       '"$resource_group", vendor=~"$vendor"}, instance)', all_=host_all),
    ]


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]],
              host_all: bool, links: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["allsmi", "accelerators"],
        "editable": True, "graphTooltip": 1, "timezone": "browser", "refresh": "30s",
        "schemaVersion": 39, "version": 1, "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables(host_all)}, "annotations": {"list": []},
        "links": links, "panels": layout(panels)}


G = 'resource_group=~"$resource_group", vendor=~"$vendor"'   # group-level (every host)
S = G + ', instance=~"$host"'                                 # narrowed to the chosen hosts
DEVICE_LEGEND = "{{instance}} {{vendor}} {{index}} {{model}}"
NODE_LINK = [{"title": "Open the node dashboard for ${__data.fields.instance}",
              "url": "/d/allsmi-node/allsmi-node?var-host=${__data.fields.instance}&${datasource:queryparam}"}]
R = "resource_group_vendor:allsmi_device_"  # the recording rules of deploy/prometheus


HA, HU = "allsmi_holder_allocated_seconds_total", "allsmi_holder_used_seconds_total"
HE = "allsmi_holder_energy_joules_total"
HG = 'resource_group=~"$resource_group", instance=~"$host"'  # holder counters carry no vendor


#: The fleet view's recording rule (deploy/prometheus): per host, group and vendor, memory in
#: use and in total of the same devices (``memory_*_bytes``), how many devices report both
#: (``memory_count``) and how many physical devices there are (``devices``).
TOTALS = "instance_resource_group_vendor:allsmi_devices:totals"


def memory_total(name: str) -> str:
    """One ``allsmi_total`` of the fleet view's rule, summed by group and vendor."""
    return f'sum by (resource_group, vendor) ({TOTALS}{{allsmi_total="{name}", {G}}})'


def memory_coverage() -> dict[str, Any]:
    """The memory of each group and vendor next to how many of its devices it counts ("7 of
    8 devices report memory in use"): a group none of whose devices reports it counts 0."""
    counted = (f'{memory_total("memory_count")} or 0 * {memory_total("devices")}')
    columns = {"Value #A": "memory in use", "Value #B": "memory in total",
               "Value #C": "devices reporting memory in use", "Value #D": "physical devices"}
    out = panel("table", "Memory and the devices it counts, by group and vendor",
                "Memory in use and in total of the devices that report both (as in the panel "
                "above), and how many devices that is of the group's physical devices: where "
                "fewer report it, the sums are partial, never filled in.", "bytes",
                targets((memory_total("memory_used_bytes"), ""),
                        (memory_total("memory_total_bytes"), ""),
                        (counted, ""), (memory_total("devices"), ""), table=True), 24, 6)
    out["transformations"][1]["options"]["renameByName"] = columns
    out["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": columns[name]},
         "properties": [{"id": "unit", "value": "none"}]} for name in ("Value #C", "Value #D")]
    return out


def fleet() -> dict[str, Any]:
    util, power = "allsmi_device_utilization_ratio", "allsmi_device_power_watts"
    mem_used, alloc = "allsmi_device_memory_used_bytes", "allsmi_device_allocated_seconds_total"
    energy, idle = ENERGY_FIELD.metric, "allsmi_device_idle_allocated_seconds_total"
    gl = "{{resource_group}} / {{vendor}}"
    panels = [
        row("Fleet"),
        panel("stat", "Devices", "Physical devices (partitions not counted).", "none",
              targets((f'count(allsmi_device_info{{parent_uuid="", {S}}})', "")), 4, 4),
        panel("stat", "Lost devices", "Devices that stopped answering (allsmi_device_up 0).",
              "none", targets((f"count(allsmi_device_up{{{S}}} == 0) or vector(0)", "")), 4, 4,
              thresholds=[(1, "red")]),
        panel("stat", "Utilization", "Mean utilization of the devices that report one.",
              unit(util), targets((f"avg({util}{{{S}}})", "")), 4, 4),
        panel("stat", "Power", "Board power of the selected devices.", unit(power),
              targets((f"sum({power}{{{S}}})", "")), 4, 4),
        panel("stat", "Allocated devices", "Devices with at least one process, on average over "
              "the rate interval.", rate_unit(alloc),
              targets((f"sum(rate({alloc}{{{S}}}[$__rate_interval]))", "")), 4, 4),
        panel("stat", "Backends down", "Vendor backends that failed or timed out in their last "
              "collection cycle.", "none",
              targets(('count(allsmi_backend_up{instance=~"$host"} == 0) or vector(0)', "")), 4, 4,
              thresholds=[(1, "red")]),
        row("Resource groups (every host of the group)"),
        panel("timeseries", "Utilization by group and vendor", "Mean utilization, from the "
              "recording rule.", unit(R + "utilization_ratio:avg"),
              targets((f"{R}utilization_ratio:avg{{{G}}}", gl)), 12, 8),
        panel("timeseries", "Memory by group and vendor", "Device memory in use and in total "
              "of the physical devices that report both, so that both count the same devices: a "
              "device whose memory in use is unknown is in neither (the table below says how "
              "many devices are counted).", unit(R + "memory_used_bytes:sum"),
              targets((memory_total("memory_used_bytes"), gl + " used"),
                      (memory_total("memory_total_bytes"), gl + " total (the same devices)")),
              12, 8),
        memory_coverage(),
        panel("timeseries", "Power by group and vendor", "Board power, from the recording rule.",
              unit(R + "power_watts:sum"), targets((f"{R}power_watts:sum{{{G}}}", gl)), 12, 8),
        panel("bargauge", "Energy in the time range by group and vendor", "Increase of the "
              "energy counters over the dashboard's time range.", GRAFANA_UNITS[base_unit(energy)],
              targets((f"sum by (resource_group, vendor) (increase({energy}{{{G}}}[$__range]))",
                       gl)), 12, 8),
        panel("timeseries", "Cost per hour by group", "Allocated device-hours x "
              "price_per_device_hour + energy x price_per_kwh, at the group's prices (groups "
              "without prices have no series). In the group's currency.", "none",
              targets(('resource_group:allsmi_cost_per_hour:rate5m{resource_group=~"$resource_group"}',
                       "{{resource_group}} ({{currency}})")), 12, 8, decimals=2),
        panel("timeseries", "Budget by group: forecast for the month and budget",
              "The calendar month's cost so far (UTC, from the hourly roll-ups: "
              "resource_group:allsmi_cost:month_to_date) and its linear forecast to the month's "
              "end (resource_group:allsmi_cost_month_forecast:linear, as allsmi export's "
              "forecast_month_end_cost) next to the group's budget_per_month; "
              "AllsmiGroupBudgetForecastExceeded fires after an hour of a forecast above it, "
              "AllsmiGroupBudgetExceeded once the month so far is. In the group's currency.", "none",
              targets(('resource_group:allsmi_cost_month_forecast:linear{resource_group=~"$resource_group"}',
                       "{{resource_group}} forecast ({{currency}})"),
                      ('resource_group:allsmi_cost:month_to_date{resource_group=~"$resource_group"}',
                       "{{resource_group}} spent this month ({{currency}})"),
                      ('max by (resource_group, currency) (allsmi_resource_group_budget_per_month'
                       '{resource_group=~"$resource_group"})',
                       "{{resource_group}} budget ({{currency}})")), 12, 8, decimals=2),
        panel("timeseries", "Busy, allocated and allocated-but-idle devices by group",
              "Device-seconds per second: busy (utilization-weighted), allocated (a process or "
              "workload on it), allocated while idle.", unit(R + "allocated_seconds:rate5m"),
              targets((f"{R}busy_seconds:rate5m{{{G}}}", gl + " busy"),
                      (f"{R}allocated_seconds:rate5m{{{G}}}", gl + " allocated"),
                      (f"{R}idle_allocated_seconds:rate5m{{{G}}}", gl + " allocated idle")),
              12, 8),
        panel("bargauge", "Allocated-but-idle device-hours in the time range", "Device-hours "
              "during which a device was held but idle, per group: the waste to reclaim.", "h",
              targets((f"sum by (resource_group) (increase({idle}{{{G}}}[$__range])) / 3600",
                       "{{resource_group}}")), 12, 8),
        row("Efficiency and waiting"),
        panel("timeseries", "Efficiency by group and vendor", "Active device-seconds (allocated "
              "time weighted by compute activity: SM active, GFX busy...; not the headline "
              "utilization) over allocated device-seconds, for the devices that report "
              "activity.", "percentunit",
              targets((f"{R}efficiency:ratio_rate5m{{{G}}}", gl)), 12, 8),
        panel("timeseries", "Busy vs active devices by group", "Device-seconds per second: busy "
              "by the vendor's headline utilization, active by compute activity; the gap is time "
              "a kernel ran without keeping the compute units busy.",
              unit(R + "active_seconds:rate5m"),
              targets((f"{R}busy_seconds:rate5m{{{G}}}", gl + " busy"),
                      (f"{R}active_seconds:rate5m{{{G}}}", gl + " active")), 12, 8),
        panel("timeseries", "What holders waited on, by group", "Allocated device-seconds per "
              "second by what their holders were doing: computing, or waiting on input, the "
              "host, communication, nothing (no process on the device) or unknown.", "none",
              targets(('sum by (resource_group, reason) (resource_group_holder_reason:'
                       'allsmi_holder_waiting_seconds:rate5m{resource_group=~"$resource_group"})',
                       "{{resource_group}} {{reason}}")), 12, 8),
        panel("table", "Device-hours per holder and waiting reason in the time range",
              "Each holder's allocated device-hours by what it was doing (allsmi waste ranks them "
              "by cost), and its active device-hours.", "none",
              targets((f"sum by (namespace, pod, job_id, reason) (increase("
                       f"allsmi_holder_waiting_seconds_total{{{HG}}}[$__range])) / 3600", ""),
                      (f"sum by (namespace, pod, job_id) (increase("
                       f"allsmi_holder_active_seconds_total{{{HG}}}[$__range])) / 3600", ""),
                      table=True), 12, 8),
        row("Fair shares of shared devices"),
        panel("table", "Device-hours and energy per namespace and job in the time range",
              "Each holder's part of shared devices (allsmi_holder_* counters): allocated "
              "device-hours split by declared share (time-slicing replicas, job shares; else "
              "equally), used device-hours split by measured per-process activity (else memory, "
              "else equally), and energy (idle energy like allocated, the rest like used). Pods "
              "show their namespace, batch jobs their job id.", "none",
              targets((f"sum by (namespace, job_id) (increase({HA}{{{HG}}}[$__range])) / 3600", ""),
                      (f"sum by (namespace, job_id) (increase({HU}{{{HG}}}[$__range])) / 3600", ""),
                      (f"sum by (namespace, job_id) (increase({HE}{{{HG}}}[$__range])) / 3.6e6", ""),
                      table=True), 12, 8),
        panel("timeseries", "Used device-seconds per second by namespace and job",
              "Rate of allsmi_holder_used_seconds_total: how much of the fleet's busy time each "
              "namespace or job is using now.", rate_unit(HU),
              targets((f"sum by (namespace, job_id) (rate({HU}{{{HG}}}[$__rate_interval]))",
                       "{{namespace}}{{job_id}}")), 12, 8),
        row("Backend health"),
        panel("state-timeline", "Backends", "1 when the backend answered its last collection "
              "cycle, 0 when it failed or timed out.", "none",
              targets(('allsmi_backend_up{instance=~"$host"}', "{{instance}} {{backend}}")), 12, 8,
              thresholds=[(1, "green")],
              mappings=[{"type": "value", "options": {"0": {"text": "down", "color": "red"},
                                                      "1": {"text": "up", "color": "green"}}}]),
        panel("timeseries", "Collection time per backend", "How long each backend took in its "
              "last cycle.", unit("allsmi_backend_collect_duration_seconds"),
              targets(('allsmi_backend_collect_duration_seconds{instance=~"$host"}',
                       "{{instance}} {{backend}}")), 12, 8),
        panel("timeseries", "Backend errors per second", "Failed or timed-out cycles.", "none",
              targets(('rate(allsmi_backend_errors_total{instance=~"$host"}[$__rate_interval])',
                       "{{instance}} {{backend}}")), 12, 8),
        panel("timeseries", "Age of the last collection", "Seconds since each exporter's last "
              "collection cycle (AllsmiExporterStale fires above 2 minutes).",
              unit("allsmi_last_collect_timestamp_seconds"),
              targets(('time() - allsmi_last_collect_timestamp_seconds{instance=~"$host"}',
                       "{{instance}}")), 12, 8),
        panel("table", "Billing exports", "The last `allsmi export` of each node, from "
              "node_exporter's textfile collector: success (1/0), seconds since it ran, coverage.",
              "none", targets(("allsmi_export_success", ""),
                              ("time() - allsmi_export_last_run_timestamp_seconds", ""),
                              ("allsmi_export_coverage_ratio", ""), table=True), 24, 6),
        row("Hosts"),
        panel("timeseries", "Utilization per host", "Mean utilization of each host's devices.",
              unit(util), targets((f"avg by (instance) ({util}{{{S}}})", "{{instance}}")), 12, 8),
        panel("timeseries", "Power per host", "Board power of each host.", unit(power),
              targets((f"sum by (instance) ({power}{{{S}}})", "{{instance}}")), 12, 8),
        panel("table", "Hosts", "Devices, mean utilization, power and memory used per host; "
              "click a host for its node dashboard.", "none",
              targets((f'count by (instance) (allsmi_device_info{{parent_uuid="", {S}}})', ""),
                      (f"avg by (instance) ({util}{{{S}}})", ""),
                      (f"sum by (instance) ({power}{{{S}}})", ""),
                      (f"sum by (instance) ({mem_used}{{{S}}} and on (instance, uuid) "
                       f'allsmi_device_info{{parent_uuid=""}})', ""), table=True), 24, 8,
              links=NODE_LINK),
        row("Devices"),
        panel("timeseries", "Utilization per device", "Each device and partition.", unit(util),
              targets((f"{util}{{{S}}}", DEVICE_LEGEND)), 12, 10),
        panel("timeseries", "Power per device", "Board owners only.", unit(power),
              targets((f"{power}{{{S}}}", DEVICE_LEGEND)), 12, 10),
        panel("table", "Devices", "Utilization, memory used, temperature and power of every "
              "device; click for its node dashboard.", "none",
              targets(*((f"{m}{{{S}}}", "") for m in (util, mem_used,
                                                      "allsmi_device_temperature_celsius", power)),
                      table=True), 24, 10, links=NODE_LINK),
    ]
    return dashboard("allsmi-fleet", "allsmi fleet", "Accelerators of every vendor by resource "
                     "group, vendor and host (allsmi serve + deploy/prometheus/allsmi-rules.yml).",
                     panels, True, [{"title": "allsmi node", "type": "link",
                                     "url": "/d/allsmi-node/allsmi-node"}])


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
    # One panel per measured field (allsmi/fields.py), in the unit of its declaration.
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
        panel("table", "Processes", "Device memory per process (the exporter needs "
              "--processes).", unit("allsmi_process_memory_bytes"),
              targets(('allsmi_process_memory_bytes{instance=~"$host"}', ""), table=True), 24, 8),
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


DASHBOARDS = {"allsmi-fleet.json": fleet, "allsmi-node.json": node}


def render(name: str) -> str:
    """The JSON text of one dashboard, as committed."""
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: build.py [--check]", file=sys.stderr)
        return 2
    stale = []
    for name in DASHBOARDS:
        path, text = HERE / name, render(name)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python deploy/grafana/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
