"""The exporter's series as the fleet view reads them back: which series, asked how, and
how they become one :class:`~allsmi.schema.Snapshot` per ``instance`` (every value checked
against the ranges the snapshot parser declares).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence

from allsmi.schema.fields import ENERGY_FIELD, MEASUREMENTS, PROCESS_MEASUREMENTS
from allsmi.schema import ATTRIBUTION_SOURCES, DeviceSample, HostSample, ProcessSample, Snapshot, Workload
from allsmi.snapshot_parse import MAX_DEVICES, MAX_PROCESSES, checked_int, checked_measurement

from allsmi.dashboard.sources.promquery import instance_matcher, plausible_time
from allsmi.dashboard.sources.promquery import sample_value

DEVICE_INFO = "allsmi_device_info"
#: Per instance, how many of its devices (by uuid) another instance reports too: one node
#: scraped twice (``allsmi serve`` and a textfile snapshot through node_exporter), counted
#: twice. One series per such instance, none on a healthy fleet.
SHARED_DEVICES = (f"count by (instance) (count by (uuid, instance) ({DEVICE_INFO}) and on (uuid) "
                  f"(count by (uuid) (count by (uuid, instance) ({DEVICE_INFO})) > 1))")
DEVICE_UP = "allsmi_device_up"
GROUP_INFO = "allsmi_resource_group_info"
PROCESS_MEMORY = "allsmi_process_memory_bytes"
#: Per-process activity gauges (``allsmi serve --processes``): metric -> (field, scale).
PROCESS_METRICS: dict[str, tuple[str, float]] = {m.metric: (m.field, m.scale) for m in PROCESS_MEASUREMENTS}
WORKLOAD_INFO = "allsmi_device_workload_info"
#: Workloads kept per device (as the snapshot parser keeps).
MAX_WORKLOADS = 256
LAST_COLLECT = "allsmi_last_collect_timestamp_seconds"
#: metric name -> (schema field, scale from schema unit to the metric's base unit)
VALUE_METRICS: dict[str, tuple[str, float]] = {
    **{m.metric: (m.field, m.scale) for m in MEASUREMENTS},
    ENERGY_FIELD.metric: (ENERGY_FIELD.field, ENERGY_FIELD.scale),
}
#: metric name -> the schema field its ``source`` label fills (what the value measures)
VALUE_SOURCES: dict[str, str] = {m.metric: m.source_field for m in MEASUREMENTS if m.source_field}
_NOT_GROUP_LABELS = {"__name__", "instance", "job", "resource_group"}


def selector(instances: Iterable[str] | None = None) -> str:
    """The series a node view needs, with every label (tests and small fleets)."""
    names = [DEVICE_INFO, DEVICE_UP, GROUP_INFO, PROCESS_MEMORY, *PROCESS_METRICS, WORKLOAD_INFO, *VALUE_METRICS]
    extra = instance_matcher(instances)
    return '{__name__=~"' + "|".join(names) + '"' + ("," + extra if extra else "") + "}"


def device_queries(instances: Iterable[str] | None = None, exclude: Sequence[str] = ()) -> list[str]:
    """The queries that fetch the devices of ``instances`` (all when ``None``, but those in
    ``exclude``), lean on labels: identity and group labels in full, the values keyed by name,
    instance and uuid only."""
    extra = instance_matcher(instances)
    if exclude:
        extra = instance_matcher(exclude).replace("=~", "!~", 1)
    extra = "," + extra if extra else ""
    values = "|".join([DEVICE_UP, *VALUE_METRICS])
    return ['{__name__=~"' + f"{DEVICE_INFO}|{GROUP_INFO}" + '"' + extra + "}",
            # (``source``: what an activity figure measures, kept beside its value)
            'max by (__name__, instance, uuid, source) ({__name__=~"' + values + '"' + extra + "})",
            '{__name__=~"' + "|".join([PROCESS_MEMORY, *PROCESS_METRICS]) + '"' + extra + "}",
            "{" + f'__name__="{WORKLOAD_INFO}"' + extra + "}"]


def _share(value: float | None, scale: float, where: str, problems: list[str]) -> float | None:
    """A per-process share (a ratio from 0 to 1 in Prometheus) as a percent, 0 to 100; else
    ``None``, and the problem said."""
    if value is None:
        return None
    percent = value / scale
    if 0.0 <= percent <= 100.0:
        return percent
    problems.append(f"{where}: {value:g} is not a share from 0 to 1")
    return None


def _int(text: str | None) -> int | None:
    try:
        return None if text in (None, "") else int(text)  # type: ignore[arg-type]
    except ValueError:
        return None


def build_snapshots(series: Sequence[dict[str, Any]], evaluated: float,
                    scraped: dict[str, float] | None = None,
                    problems: dict[str, list[str]] | None = None) -> dict[str, Snapshot]:
    """One snapshot per ``instance`` from the selector's result (pure; tested on its own).

    Every value passes the snapshot parser's checks (the ranges declared in
    :mod:`allsmi.schema.fields`, whole numbers for bytes, indexes and pids): a value that fails is
    unknown, and what was wrong is listed per instance in ``problems``."""
    scraped = scraped or {}
    problems = {} if problems is None else problems

    def sink(instance: str) -> list[str]:
        return problems.setdefault(instance, [])
    devices: dict[str, dict[str, dict[str, Any]]] = {}
    order: dict[str, list[str]] = {}
    group_labels: dict[tuple[str, str], dict[str, str]] = {}
    values: list[tuple[str, str, str, float, str | None]] = []
    processes: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    cut: dict[tuple[str, str], int] = {}  # processes past MAX_PROCESSES per device
    extra: dict[str, int] = {}
    workloads: dict[tuple[str, str], list[Workload]] = {}
    attributed: set[str] = set()  # instances publishing workloads: a device without one has none
    for sample in series:
        metric = sample.get("metric") or {}
        name = metric.get("__name__", "")
        instance = metric.get("instance", "")
        uuid = metric.get("uuid", "")
        if name == DEVICE_INFO and uuid:
            if uuid in devices.get(instance, ()):  # one device in two series (two jobs, HA replicas)
                continue
            if len(devices.get(instance, ())) >= MAX_DEVICES:
                extra[instance] = extra.get(instance, 0) + 1  # as many as a snapshot may hold
                continue
            fields: dict[str, Any] = {
                "id": uuid, "uuid": uuid, "vendor": metric.get("vendor", "") or "unknown",
                "kind": metric.get("kind", "") or "gpu", "backend": metric.get("backend", ""),
                "index": checked_int(_int(metric.get("index")), f"{uuid} index", sink(instance), 0, 2**31),
                "name": metric.get("model") or None,
                "bus_id": metric.get("bus_id") or None,
                "driver_version": metric.get("driver_version") or None,
                "firmware_version": metric.get("firmware_version") or None,
                "parent": metric.get("parent_uuid") or None,
                "resource_group": metric.get("resource_group") or None, "health": "unknown"}
            devices.setdefault(instance, {})[uuid] = fields
            order.setdefault(instance, []).append(uuid)
        elif name == GROUP_INFO:
            group_labels[(instance, metric.get("resource_group", ""))] = {
                k: v for k, v in metric.items() if k not in _NOT_GROUP_LABELS}
        elif (name == PROCESS_MEMORY or name in PROCESS_METRICS) and uuid:
            pid = checked_int(_int(metric.get("pid")), f"{uuid} process pid", sink(instance), 0, 2**32)
            if pid is None:
                continue
            held_by = processes.setdefault((instance, uuid), {})
            proc = held_by.get(pid)
            if proc is None:
                if len(held_by) >= MAX_PROCESSES:  # as many as a snapshot may hold per device
                    cut[(instance, uuid)] = cut.get((instance, uuid), 0) + 1
                    continue
                proc = held_by[pid] = {"pid": pid, "user": metric.get("user") or None,
                                       "command": metric.get("command") or None}
            if name == PROCESS_MEMORY:
                proc["memory_bytes"] = checked_int(sample_value(sample), f"{uuid} process {pid} memory", sink(instance))
            else:
                field, scale = PROCESS_METRICS[name]
                proc[field] = _share(sample_value(sample), scale, f"{uuid} process {pid} {name}", sink(instance))
        elif name == WORKLOAD_INFO and uuid:
            attributed.add(instance)
            held = workloads.setdefault((instance, uuid), [])
            if metric.get("source") in ATTRIBUTION_SOURCES and len(held) < MAX_WORKLOADS:
                workload = Workload(source=metric["source"], **{
                    k: metric.get(k) or None for k in ("namespace", "pod", "container", "job_id", "user")})
                if workload not in held:  # the same series from two jobs or HA replicas
                    held.append(workload)
        elif uuid:
            value = sample_value(sample)
            if value is not None:
                values.append((instance, uuid, name, value, metric.get("source") or None))
    for instance, uuid, name, value, source in values:
        fields = devices.get(instance, {}).get(uuid)
        if fields is None:
            continue
        if name == DEVICE_UP:
            fields["health"] = "ok" if value >= 1 else "lost"
        elif name in VALUE_METRICS:
            field, scale = VALUE_METRICS[name]
            # Not a plausible reading: unknown, as the snapshot parser does, and said so.
            fields[field] = checked_measurement(field, value / scale, f"{uuid} {name}", sink(instance))
            named_by = VALUE_SOURCES.get(name)
            if named_by is not None and fields[field] is not None:  # compute_active_source
                fields[named_by] = source
    for (instance, uuid), count in cut.items():
        sink(instance).append(f"{uuid}: {MAX_PROCESSES + count} processes, only the first {MAX_PROCESSES} kept")
    for instance, count in extra.items():
        sink(instance).insert(0, f"{MAX_DEVICES + count} devices, only the first {MAX_DEVICES} kept")
    out: dict[str, Snapshot] = {}
    for instance, by_uuid in devices.items():
        samples = []
        for uuid in order[instance]:
            fields = by_uuid[uuid]
            fields["labels"] = group_labels.get((instance, fields["resource_group"] or ""), {})
            held_here = processes.get((instance, uuid), {})
            fields["processes"] = tuple(ProcessSample(**held_here[pid]) for pid in sorted(held_here))
            held = workloads.get((instance, uuid))
            fields["workloads"] = tuple(held) if held is not None else () if instance in attributed else None
            samples.append(DeviceSample(**fields))
        # (then by id: the series come in no fixed order, and a partition's name is its place
        # among its device's: allsmi.dashboard.state.naming)
        samples.sort(key=lambda d: (d.vendor, d.parent is not None,
                                    d.index if d.index is not None else 1 << 30, d.id))
        when = scraped.get(instance, evaluated)
        if not plausible_time(when):
            when = evaluated
        out[instance] = Snapshot(timestamp=dt.datetime.fromtimestamp(when, dt.timezone.utc),
                                 host=HostSample(hostname=instance), devices=tuple(samples))
    return out

