"""The exporter's metric families: declared once, built from a snapshot.

Every family the exporter can emit is declared in :data:`FAMILIES` (name,
type, unit, labels, help). The device gauges are derived from
:data:`allsmi.schema.fields.MEASUREMENTS`, so a new measured field becomes a gauge
without an edit here. :func:`allsmi.exporter.builder.build_families` turns one
snapshot (plus the accumulated counters, when serving) into prometheus_client
metric families from these declarations; ``docs/metrics.md`` is generated from the
same declarations (:mod:`allsmi.exporter.reference`).
"""

from __future__ import annotations

from dataclasses import dataclass

from allsmi.exporter.holders import HOLDER_FORGET_AFTER_SECONDS, OVERFLOW
from allsmi.schema.fields import ENERGY_FIELD, MEASUREMENTS, PROCESS_MEASUREMENTS, TRAFFIC_MEASUREMENTS

#: Join labels carried by every per-device series.
DEVICE_LABELS: tuple[str, ...] = ("uuid", "index", "vendor", "model", "resource_group")
#: Labels of ``allsmi_device_info``.
INFO_LABELS: tuple[str, ...] = ("uuid", "index", "vendor", "kind", "model", "resource_group",
                                "backend", "bus_id", "driver_version", "firmware_version",
                                "parent_uuid")
PROCESS_LABELS: tuple[str, ...] = ("uuid", "pid", "user", "command")
#: Labels of ``allsmi_device_workload_info``: the join labels, then the workload's fields.
WORKLOAD_LABELS: tuple[str, ...] = ("uuid", "resource_group", "source", "namespace", "pod",
                                    "container", "job_id", "user")
#: Longest ``command`` label value; longer command lines are cut (bounded label size).
COMMAND_MAX_CHARS = 64
_BASE_UNITS = ("bytes", "celsius", "watts", "hertz", "ratio", "seconds", "joules")


@dataclass(frozen=True)
class Family:
    """One metric family as it appears in the exposition."""

    name: str
    """Full sample name (counters end in ``_total``, info metrics in ``_info``)."""
    type: str
    """``gauge``, ``counter`` or ``info``."""
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    """Base unit, also the name's suffix before ``_total`` (OpenMetrics ``# UNIT``)."""
    source: str = ""
    """Where the value comes from (for the metric reference)."""
    condition: str = ""
    """When the family or a series is present (for the metric reference)."""


def _unit_of(metric: str) -> str:
    stem = metric[:-len("_total")] if metric.endswith("_total") else metric
    last = stem.rsplit("_", 1)[-1]
    return last if last in _BASE_UNITS else ""


DEVICE_INFO = Family(
    "allsmi_device_info", "info",
    "Identity of a device or partition; always 1. Join on uuid for names and versions.",
    INFO_LABELS, source="identity fields of the device sample; parent_uuid is the owning device's "
    "id for a partition (MIG instance, compute partition, die), empty otherwise",
    condition="every device in the latest snapshot")
DEVICE_UP = Family(
    "allsmi_device_up", "gauge",
    "1 when the device answers (health ok or degraded), 0 when it is lost.",
    DEVICE_LABELS, source="health", condition="omitted while health is unknown")

GAUGES: tuple[tuple[Family, str, float], ...] = tuple(
    (Family(m.metric, "gauge", m.help,
            DEVICE_LABELS + (("source",) if m.source_field else ()), _unit_of(m.metric),
            source=f"{m.field} ({m.unit})" + (f" x {m.scale:g}" if m.scale != 1.0 else ""),
            condition=("board-level: only on the device that owns the board, never on its "
                       "partitions; " if m.board_level else "") + "omitted when unknown"),
     m.field, m.scale)
    for m in MEASUREMENTS)
"""(family, schema field, scale) for each device gauge, from :data:`allsmi.schema.fields.MEASUREMENTS`."""

#: Gauge family name -> the DeviceSample text field exported as its ``source`` label (what the
#: value measures, e.g. ``compute_active_source``); a value whose source is not known says
#: ``unknown``.
GAUGE_SOURCES: dict[str, str] = {m.metric: m.source_field for m in MEASUREMENTS if m.source_field}

ENERGY_TOTAL = Family(
    ENERGY_FIELD.metric, "counter",
    "Energy the board used since the exporter started, in joules: deltas of the device's "
    "hardware energy counter (resets handled), else its power integrated over time. A "
    "partitioned board's energy is split among its partitions and itself by their billing "
    "shares (allsmi_device_partition_share_ratio).",
    DEVICE_LABELS, "joules",
    source="allsmi.usage: energy_joules deltas, else trapezoid of power_watts; gaps longer "
    "than --energy-max-gap are not bridged; allsmi.usage.split_board_energy for partitions",
    condition="devices with an energy counter or a power reading, and partitions of such a "
    "board that measure no energy of their own")
BUSY_TOTAL = Family(
    "allsmi_device_busy_seconds_total", "counter",
    "Utilization integrated over time since the exporter started, in seconds.",
    DEVICE_LABELS, "seconds", source="allsmi.usage: trapezoid of utilization_percent / 100",
    condition="devices that report utilization")
ALLOCATED_TOTAL = Family(
    "allsmi_device_allocated_seconds_total", "counter",
    "Time during which at least one process or workload held the device, since the exporter "
    "started.",
    DEVICE_LABELS, "seconds",
    source="allsmi.usage: trapezoid of (processes or workloads present)",
    condition="devices whose processes or workloads are known, with health ok or degraded")
IDLE_ALLOCATED_TOTAL = Family(
    "allsmi_device_idle_allocated_seconds_total", "counter",
    "Time during which the device was held (a process or workload on it) while its "
    "utilization (on a device without one, a MIG instance: its compute activity) stayed below "
    "[accounting] idle_threshold_percent, since the exporter started.",
    DEVICE_LABELS, "seconds",
    source="allsmi.usage: trapezoid of (held and utilization_percent, else "
    "compute_active_percent, < idle_threshold_percent); never more than "
    "allsmi_device_allocated_seconds_total",
    condition="devices whose processes or workloads and utilization or compute activity are "
    "known; omitted for good (until the exporter restarts) once a held device's utilization and "
    "compute activity were both unknown, never a known 0")
OBSERVED_TOTAL = Family(
    "allsmi_device_observed_seconds_total", "counter",
    "Time covered by valid samples since the exporter started: the denominator for coverage.",
    DEVICE_LABELS, "seconds", source="allsmi.usage: intervals between consecutive valid samples",
    condition="every device seen with health ok or degraded")
ACTIVE_TOTAL = Family(
    "allsmi_device_active_seconds_total", "counter",
    "Allocated time weighted by compute activity (compute_active_percent: SM activity, GFX "
    "busy..., not the headline utilization) since the exporter started, in seconds.",
    DEVICE_LABELS, "seconds",
    source="allsmi.usage: trapezoid of (held x compute_active_percent / 100); divide by "
    "allsmi_device_active_allocated_seconds_total for the efficiency",
    condition="devices that report compute activity; unknown while a held device's activity is")
ACTIVE_ALLOCATED_TOTAL = Family(
    "allsmi_device_active_allocated_seconds_total", "counter",
    "Allocated time whose compute activity was known since the exporter started, in seconds: "
    "the efficiency is allsmi_device_active_seconds_total over it (time of unknown activity is "
    "in neither, never counted as inactive).",
    DEVICE_LABELS, "seconds",
    source="allsmi.usage: the allocated seconds of the intervals whose active seconds are known",
    condition="devices that report compute activity, as allsmi_device_active_seconds_total")
#: Byte counters of the traffic rates (allsmi.schema.fields.TRAFFIC_MEASUREMENTS), by counter attribute.
TRAFFIC_TOTALS: tuple[tuple[Family, str], ...] = tuple(
    (Family(m.metric, "counter", m.help[:-1] + ", since the exporter started.", DEVICE_LABELS,
            "bytes", source=f"{m.field} x the sampling interval, summed",
            condition="devices that report it"),
     m.field.replace("_per_second", ""))
    for m in TRAFFIC_MEASUREMENTS)
CLAIM_CONFLICTS_TOTAL = Family(
    "allsmi_device_claim_conflicts_total", "counter",
    "Collection cycles in which the device was claimed at once by holders of attribution "
    "sources that say nothing of each other (a pod from the kubelet and a job of the "
    "job-mapping directory), each billed a part, since the exporter started.",
    DEVICE_LABELS, source="Attribution.conflicts (allsmi.attribution.runner); the sources' "
    "status messages (allsmi doctor, the snapshot's attribution) name the claimants",
    condition="devices whose holders an attribution source knows (0 until a conflict)")
COUNTERS: tuple[tuple[Family, str], ...] = (
    (ENERGY_TOTAL, "energy_joules"), (BUSY_TOTAL, "busy_seconds"),
    (ALLOCATED_TOTAL, "allocated_seconds"), (IDLE_ALLOCATED_TOTAL, "idle_allocated_seconds"),
    (OBSERVED_TOTAL, "observed_seconds"), (ACTIVE_TOTAL, "active_seconds"),
    (ACTIVE_ALLOCATED_TOTAL, "active_allocated_seconds")) + TRAFFIC_TOTALS \
    + ((CLAIM_CONFLICTS_TOTAL, "claim_conflicts"),)
"""(family, attribute of :class:`allsmi.exporter.counters.DeviceTotals`)."""

#: Labels of the per-holder counters (allsmi.exporter.holders).
HOLDER_LABELS: tuple[str, ...] = ("uuid", "resource_group", "namespace", "pod", "job_id", "user",
                                  "method")
_HOLDER_SOURCE = ("allsmi.fairshare.split of the device's increments among its holders; "
                  "user is empty without --processes")
_HOLDER_CONDITION = ("one series per device, holder and method while the holder is on the "
                     f"device, dropped {HOLDER_FORGET_AFTER_SECONDS:g} s after it leaves")
HOLDER_ALLOCATED_TOTAL = Family(
    "allsmi_holder_allocated_seconds_total", "counter",
    "A holder's part of the device's allocated time since the exporter started, split by "
    "declared share (method: exclusive, partition, declared or equal).",
    HOLDER_LABELS, "seconds", source=_HOLDER_SOURCE, condition=_HOLDER_CONDITION)
HOLDER_USED_TOTAL = Family(
    "allsmi_holder_used_seconds_total", "counter",
    "A holder's part of the device's busy time since the exporter started, split by measured "
    "activity (method: activity, memory or equal).",
    HOLDER_LABELS, "seconds", source=_HOLDER_SOURCE, condition=_HOLDER_CONDITION)
HOLDER_ENERGY_TOTAL = Family(
    "allsmi_holder_energy_joules_total", "counter",
    "A holder's part of the board's energy since the exporter started: energy of idle time "
    "split like allocated time, the rest like busy time (method says which split).",
    HOLDER_LABELS, "joules", source=_HOLDER_SOURCE, condition=_HOLDER_CONDITION)
HOLDER_ACTIVE_TOTAL = Family(
    "allsmi_holder_active_seconds_total", "counter",
    "A holder's part of the device's active time (allocated time weighted by compute activity) "
    "since the exporter started: its allocated time x the device's compute activity (split "
    "like allocated time; method: exclusive, partition, declared or equal).",
    HOLDER_LABELS, "seconds", source=_HOLDER_SOURCE, condition=_HOLDER_CONDITION)
HOLDER_WAITING_TOTAL = Family(
    "allsmi_holder_waiting_seconds_total", "counter",
    "A holder's part of the device's allocated time, by what it was doing (reason: computing, "
    "input, host, communication, nothing or unknown; docs/activity.md), since the exporter "
    "started.",
    HOLDER_LABELS + ("reason",), "seconds", source=_HOLDER_SOURCE + "; the reason is the "
    "collector's classification of the holder in the interval (DeviceSample.waiting)",
    condition=_HOLDER_CONDITION + "; a reason's series from the first interval the holder "
    "spent on it (a holder always computing has one series, not six)")
HOLDER_COUNTERS: tuple[tuple[Family, str], ...] = (
    (HOLDER_ALLOCATED_TOTAL, "allocated_seconds"), (HOLDER_USED_TOTAL, "used_seconds"),
    (HOLDER_ENERGY_TOTAL, "energy_joules"), (HOLDER_ACTIVE_TOTAL, "active_seconds"))
"""(family, attribute of :class:`allsmi.exporter.holders.HolderValues`)."""

PARTITION_SHARE = Family(
    "allsmi_device_partition_share_ratio", "gauge",
    "Share of its physical device that a partition (MIG instance, compute partition, die) is "
    "billed for; on a partitioned device, the remainder no partition holds. Allocated time x "
    "this share is what price_per_device_hour prices.",
    DEVICE_LABELS, "ratio",
    source="allsmi.usage.billing_shares: partition_share, else an equal split among the "
    "parent's partitions; shares over 1 scaled down; the parent gets 1 - the sum (at least 0)",
    condition="partitions and the devices they belong to; absent for whole devices (a share of 1)")
RESOURCE_GROUP_INFO = Family(
    "allsmi_resource_group_info", "info",
    "A resource group in use or declared in the configuration, with its extra labels; always 1.",
    ("resource_group", "<the group's labels>"), source="configuration [groups.NAME.labels]",
    condition="each group assigned to a device or declared in the config")
PRICE_DEVICE_HOUR = Family(
    "allsmi_resource_group_price_per_device_hour", "gauge",
    "Configured price of one allocated device-hour in the group, in the group's currency (a "
    "partition is billed at its share of its device).",
    ("resource_group", "currency"), source="configuration [groups.NAME] price_per_device_hour",
    condition="declared groups with a price per device-hour")
PRICE_KWH = Family(
    "allsmi_resource_group_price_per_kwh", "gauge",
    "Configured price of one kWh of board energy in the group, in the group's currency.",
    ("resource_group", "currency"), source="configuration [groups.NAME] price_per_kwh",
    condition="declared groups with a price per kWh")
BUDGET_MONTH = Family(
    "allsmi_resource_group_budget_per_month", "gauge",
    "Configured budget of the group for one calendar month, in the group's currency (the "
    "alerts AllsmiGroupBudgetForecastExceeded and AllsmiGroupBudgetExceeded compare its cost "
    "with it).",
    ("resource_group", "currency"), source="configuration [groups.NAME] budget_per_month",
    condition="declared groups with a budget")
WORKLOAD_INFO = Family(
    "allsmi_device_workload_info", "info",
    "A workload (Kubernetes container or batch job) holding the device; always 1. Join on uuid "
    "as allsmi_device_info.",
    WORKLOAD_LABELS,
    source="workloads[] of the device (attribution sources: kubernetes, hpc-job, cgroup, "
    "simulated); a field the source does not know is empty; user is empty without --processes",
    condition="one series per device and workload; none while no attribution source is active")
PROCESS_MEMORY = Family(
    "allsmi_process_memory_bytes", "gauge",
    f"Device memory used by a process, in bytes (command cut to {COMMAND_MAX_CHARS} characters).",
    PROCESS_LABELS, "bytes", source="processes[].memory_bytes",
    condition="only with --processes; processes whose memory is unknown are omitted")
PROCESS_GAUGES: tuple[tuple[Family, str, float], ...] = tuple(
    (Family(m.metric, "gauge", m.help + f" Command cut to {COMMAND_MAX_CHARS} characters.",
            PROCESS_LABELS, _unit_of(m.metric),
            source=f"processes[].{m.field} ({m.unit}) x {m.scale:g}",
            condition="only with --processes; one series per device and process while it runs; "
            "omitted where the vendor does not report it"),
     m.field, m.scale)
    for m in PROCESS_MEASUREMENTS)
"""(family, ProcessSample field, scale) for each per-process activity gauge, from
:data:`allsmi.schema.fields.PROCESS_MEASUREMENTS`."""
BACKEND_UP = Family(
    "allsmi_backend_up", "gauge",
    "1 when the backend answered in the last collection cycle, 0 when it failed or timed out.",
    ("backend",), source="backend status",
    condition="backends that are present; a vendor never found since start-up is not listed")
BACKEND_DURATION = Family(
    "allsmi_backend_collect_duration_seconds", "gauge",
    "How long the backend took in the last collection cycle, in seconds.",
    ("backend",), "seconds", source="backend status",
    condition="omitted while a previous call is still hung")
BACKEND_ERRORS = Family(
    "allsmi_backend_errors_total", "counter",
    "Collection cycles in which the backend failed or timed out, since the exporter started.",
    ("backend",), source="backend status", condition="as allsmi_backend_up")
ATTRIBUTION_BAD_SHARES = Family(
    "allsmi_attribution_bad_shares_total", "counter",
    "Declared shares an attribution source could not bill as written, counted in every "
    "collection cycle that read them, since the exporter started: reason not_a_share (NaN, 2, "
    "-1: ignored, the job kept without a share), above_device (a device whose declared shares "
    "add up to more than 1, counted once per device: scaled down to it).",
    ("source", "reason"), source="the hpc-job source's job files (SourceResult.bad_shares); "
    "its status message names the files, lines and devices",
    condition="sources that read declared shares (hpc-job), once they answered")
LAST_COLLECT = Family(
    "allsmi_last_collect_timestamp_seconds", "gauge",
    "When the latest collection cycle finished, in seconds since the epoch.",
    (), "seconds", source="snapshot timestamp", condition="always")
BUILD_INFO = Family(
    "allsmi_build_info", "info", "The allsmi version serving these metrics; always 1.",
    ("version",), source="allsmi.__version__", condition="always")

RENDER_ERRORS = Family(
    "allsmi_exporter_render_errors_total", "counter",
    "Collection cycles whose exposition could not be rendered whole, since the exporter "
    "started: devices left out, or the whole cycle (then only these exporter families are "
    "served and /ready turns 503 once the last whole exposition is stale).",
    (), source="exceptions while rendering, duplicate device ids",
    condition="allsmi serve only; always")
HOLDER_OVERFLOW = Family(
    "allsmi_holder_overflow_seconds_total", "counter",
    "Allocated device time credited to overflow holders (namespace, pod and job_id "
    f"\"{OVERFLOW}\") since the exporter started: time of holders that arrived while "
    "[serve] max_holder_series holder series existed.",
    (), "seconds", source="allsmi.exporter.holders.HolderCounters.overflow_seconds",
    condition="allsmi serve only; always (0 while the cap is not reached)")
LEDGER_WRITE_ERRORS = Family(
    "allsmi_ledger_write_errors_total", "counter",
    "Ledger writes that failed since the exporter started (the intervals are kept and retried).",
    (), source="LedgerRecorder.write_errors", condition="allsmi serve --ledger only")
LEDGER_UNWRITTEN = Family(
    "allsmi_ledger_unwritten_intervals", "gauge",
    "Completed ledger intervals held in memory because the ledger could not take them yet.",
    (), source="LedgerRecorder.unwritten", condition="allsmi serve --ledger only")
LEDGER_DROPPED = Family(
    "allsmi_ledger_dropped_intervals_total", "counter",
    "Ledger intervals given up because too many waited to be written, since the exporter started.",
    (), source="LedgerRecorder.dropped_intervals", condition="allsmi serve --ledger only")

LEDGER_REFUSED = Family(
    "allsmi_ledger_refused_intervals_total", "counter",
    "Ledger intervals refused because the ledger already held time placed there (a wall clock "
    "that stepped back into recorded time), since the exporter started.",
    (), source="LedgerRecorder.refused_intervals", condition="allsmi serve --ledger only")

WEB_CONFIG_RELOAD = Family(
    "allsmi_exporter_web_config_last_reload_successful", "gauge",
    "1 while the web configuration in use is the latest one on disk; 0 after a change to it "
    "(or to a certificate, key or CA file it names) that did not load: the previous one is "
    "still in use, and the log says why.",
    (), source="allsmi.exporter.webreload.WebConfigWatcher.last_reload_ok",
    condition="allsmi serve --web-config only")

FAMILIES: tuple[Family, ...] = (
    (DEVICE_INFO, DEVICE_UP) + tuple(g for g, _, _ in GAUGES) + (PARTITION_SHARE,)
    + tuple(c for c, _ in COUNTERS) + tuple(c for c, _ in HOLDER_COUNTERS)
    + (HOLDER_WAITING_TOTAL,)
    + (RESOURCE_GROUP_INFO, PRICE_DEVICE_HOUR, PRICE_KWH, BUDGET_MONTH, WORKLOAD_INFO, PROCESS_MEMORY)
    + tuple(g for g, _, _ in PROCESS_GAUGES)
    + (BACKEND_UP, BACKEND_DURATION, BACKEND_ERRORS, ATTRIBUTION_BAD_SHARES,
       LAST_COLLECT, BUILD_INFO, RENDER_ERRORS, HOLDER_OVERFLOW, LEDGER_WRITE_ERRORS, LEDGER_UNWRITTEN,
       LEDGER_DROPPED, LEDGER_REFUSED, WEB_CONFIG_RELOAD))
"""Every family the exporter can emit, in exposition order."""
