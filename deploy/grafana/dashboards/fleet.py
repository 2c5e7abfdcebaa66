"""The fleet dashboard (allsmi-fleet.json): every host, by resource group and vendor,
from the exporter's metrics and the recording rules of deploy/prometheus/allsmi-rules.yml."""

from __future__ import annotations

from typing import Any

from allsmi.schema.fields import ENERGY_FIELD

from .panels import DEVICE_LEGEND, G, S, dashboard, panel, row, table, targets
from .units import DEVICE_HOURS, GRAFANA_UNITS, KWH, base_unit, rate_unit, unit

NODE_LINK = [{"title": "Open the node dashboard for ${__data.fields.instance}",
              "url": "/d/allsmi-node/allsmi-node?var-host=${__data.fields.instance}&${datasource:queryparam}"}]
R = "resource_group_vendor:allsmi_device_"  # the recording rules of deploy/prometheus


HA, HU = "allsmi_holder_allocated_seconds_total", "allsmi_holder_used_seconds_total"
HE = "allsmi_holder_energy_joules_total"
HG = 'resource_group=~"$resource_group", instance=~"$host"'  # holder counters carry no vendor
#: Who the namespace, job or user views name: a pod its namespace, a batch job its id, and a
#: holder of neither (a process on a host without Kubernetes or Slurm) its user.
OWNER_LEGEND = "{{owner}}"


def by_owner(expr: str) -> str:
    """``expr`` (holder series) summed per owner: ``namespace/NS`` for a pod, else ``job/ID`` for
    a batch job, else ``user/NAME``, so that a pod whose processes run as several users is one
    row and the users of a host without Kubernetes or Slurm are not summed into one nameless
    row. The label is added to series that stay distinct, so no two collide before the sum."""
    owner = expr
    for label, kind in (("user", "user"), ("job_id", "job"), ("namespace", "namespace")):
        owner = f'label_replace({owner}, "owner", "{kind}/$1", "{label}", "(.+)")'
    return f"sum by (owner) ({owner})"


#: The fleet view's recording rule (deploy/prometheus): per host, group and vendor, memory in
#: use and in total of the same devices (``memory_*_bytes``), how many devices report both
#: (``memory_count``) and how many physical devices there are (``devices``).
TOTALS = "instance_resource_group_vendor:allsmi_devices:totals"


def fleet_total(name: str) -> str:
    """One ``allsmi_total`` of the fleet view's rule, summed by group and vendor."""
    return f'sum by (resource_group, vendor) ({TOTALS}{{allsmi_total="{name}", {G}}})'


def memory_coverage() -> dict[str, Any]:
    """The memory of each group and vendor next to how many of its devices it counts ("7 of
    8 devices report memory in use"): a group none of whose devices reports it counts 0."""
    counted = (f'{fleet_total("memory_count")} or 0 * {fleet_total("devices")}')
    return table("Memory and the devices it counts, by group and vendor",
                 "Memory in use and in total of the devices that report both (as in the panel "
                 "above), and how many devices that is of the group's physical devices: where "
                 "fewer report it, the sums are partial, never filled in.",
                 [(fleet_total("memory_used_bytes"), "memory in use", unit("allsmi_device_memory_used_bytes")),
                  (fleet_total("memory_total_bytes"), "memory in total", unit("allsmi_device_memory_total_bytes")),
                  (counted, "devices reporting memory in use", "none"),
                  (fleet_total("devices"), "physical devices", "none")], 24, 6)


def power_utilization_coverage() -> dict[str, Any]:
    """Power and utilization of each group and vendor next to how many of its devices report
    them ("6 of 8 devices report power"), as the memory table does: a group none of whose
    devices reports one counts 0, known, never an empty cell."""
    def counted(name: str) -> str:
        return f'{fleet_total(name)} or 0 * {fleet_total("devices")}'
    util, power = "allsmi_device_utilization_ratio", "allsmi_device_power_watts"
    return table("Power, utilization and the devices they count, by group and vendor",
                 "Board power (summed) and mean utilization of the devices that report them (as "
                 "in the panels above), and how many report each beside the group's physical "
                 "devices and partitions: only board owners carry power, utilization is of "
                 "devices and partitions. Where fewer report it, the sums are partial, never "
                 "filled in.",
                 [(fleet_total("power_watts"), "power", unit(power)),
                  (counted("power_count"), "devices reporting power", "none"),
                  (f"{R}utilization_ratio:avg{{{G}}}", "utilization", unit(util)),
                  (counted("utilization_count"), "devices and partitions reporting utilization",
                   "none"),
                  (fleet_total("devices"), "physical devices", "none"),
                  (counted("partitions"), "partitions", "none")], 24, 6)


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
              "recording rule, of the devices that report one (the table below says how many).", unit(R + "utilization_ratio:avg"),
              targets((f"{R}utilization_ratio:avg{{{G}}}", gl)), 12, 8),
        panel("timeseries", "Memory by group and vendor", "Device memory in use and in total "
              "of the physical devices that report both, so that both count the same devices: a "
              "device whose memory in use is unknown is in neither (the table below says how "
              "many devices are counted).", unit(R + "memory_used_bytes:sum"),
              targets((fleet_total("memory_used_bytes"), gl + " used"),
                      (fleet_total("memory_total_bytes"), gl + " total (the same devices)")),
              12, 8),
        memory_coverage(),
        panel("timeseries", "Power by group and vendor", "Board power, from the recording rule, "
              "of the devices that report it (the table below says how many).",
              unit(R + "power_watts:sum"), targets((f"{R}power_watts:sum{{{G}}}", gl)), 12, 8),
        panel("bargauge", "Energy in the time range by group and vendor", "Increase of the "
              "energy counters over the dashboard's time range.", GRAFANA_UNITS[base_unit(energy)],
              targets((f"sum by (resource_group, vendor) (increase({energy}{{{G}}}[$__range]))",
                       gl)), 12, 8),
        power_utilization_coverage(),
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
              "during which a device was held but idle, per group: the waste to reclaim.", DEVICE_HOURS,
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
        table("Device-hours per holder and waiting reason in the time range",
              "Each holder's (pod, job or user) allocated device-hours by what it was doing "
              "(allsmi waste ranks them by cost), and its active device-hours.",
              [(f"sum by (namespace, pod, job_id, user, reason) (increase("
                f"allsmi_holder_waiting_seconds_total{{{HG}}}[$__range])) / 3600",
                "device-hours by reason", DEVICE_HOURS),
               (f"sum by (namespace, pod, job_id, user) (increase("
                f"allsmi_holder_active_seconds_total{{{HG}}}[$__range])) / 3600",
                "active device-hours", DEVICE_HOURS)], 12, 8),
        row("Fair shares of shared devices"),
        table("Device-hours and energy per namespace, job or user in the time range",
              "Each holder's part of shared devices (allsmi_holder_* counters): allocated "
              "device-hours split by declared share (time-slicing replicas, job shares; else "
              "equally), used device-hours split by measured per-process activity (else memory, "
              "else equally), and energy (idle energy like allocated, the rest like used). Pods "
              "show as namespace/NS, batch jobs as job/ID, other processes as user/NAME.",
              [(by_owner(f"increase({HA}{{{HG}}}[$__range])") + " / 3600",
                "allocated device-hours", DEVICE_HOURS),
               (by_owner(f"increase({HU}{{{HG}}}[$__range])") + " / 3600",
                "used device-hours", DEVICE_HOURS),
               (by_owner(f"increase({HE}{{{HG}}}[$__range])") + " / 3.6e6", "energy", KWH)],
              12, 8),
        panel("timeseries", "Used device-seconds per second by namespace, job or user",
              "Rate of allsmi_holder_used_seconds_total: how much of the fleet's busy time each "
              "namespace, job or (other processes) user is using now.", rate_unit(HU),
              targets((by_owner(f"rate({HU}{{{HG}}}[$__rate_interval])"), OWNER_LEGEND)), 12, 8),
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
        table("Billing exports", "The last `allsmi export` of each node, from node_exporter's "
              "textfile collector: success (1/0), time since it ran, coverage.",
              [("allsmi_export_success", "success", "none"),
               ("time() - allsmi_export_last_run_timestamp_seconds", "since the last run",
                unit("allsmi_export_last_run_timestamp_seconds")),
               ("allsmi_export_coverage_ratio", "coverage", unit("allsmi_export_coverage_ratio"))],
              24, 6),
        row("Hosts"),
        panel("timeseries", "Utilization per host", "Mean utilization of each host's devices.",
              unit(util), targets((f"avg by (instance) ({util}{{{S}}})", "{{instance}}")), 12, 8),
        panel("timeseries", "Power per host", "Board power of each host.", unit(power),
              targets((f"sum by (instance) ({power}{{{S}}})", "{{instance}}")), 12, 8),
        table("Hosts", "Devices, mean utilization, power and memory used per host; click a "
              "host for its node dashboard.",
              [(f'count by (instance) (allsmi_device_info{{parent_uuid="", {S}}})', "devices",
                "none"),
               (f"avg by (instance) ({util}{{{S}}})", "utilization", unit(util)),
               (f"sum by (instance) ({power}{{{S}}})", "power", unit(power)),
               (f"sum by (instance) ({mem_used}{{{S}}} and on (instance, uuid) "
                f'allsmi_device_info{{parent_uuid=""}})', "memory used", unit(mem_used))],
              24, 8, links=NODE_LINK),
        row("Devices"),
        panel("timeseries", "Utilization per device", "Each device and partition.", unit(util),
              targets((f"{util}{{{S}}}", DEVICE_LEGEND)), 12, 10),
        panel("timeseries", "Power per device", "Board owners only.", unit(power),
              targets((f"{power}{{{S}}}", DEVICE_LEGEND)), 12, 10),
        table("Devices", "Utilization, memory used, temperature and power of every device; "
              "click for its node dashboard.",
              [(f"{m}{{{S}}}", name, unit(m)) for m, name in (
                  (util, "utilization"), (mem_used, "memory used"),
                  ("allsmi_device_temperature_celsius", "temperature"), (power, "power"))],
              24, 10, links=NODE_LINK),
    ]
    return dashboard("allsmi-fleet", "allsmi fleet", "Accelerators of every vendor by resource "
                     "group, vendor and host (allsmi serve + deploy/prometheus/allsmi-rules.yml).",
                     panels, True, [{"title": "allsmi node", "type": "link",
                                     "url": "/d/allsmi-node/allsmi-node"}])
