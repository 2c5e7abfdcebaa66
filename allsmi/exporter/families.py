"""The exporter's metric families: declared once, built from a snapshot.

Every family the exporter can emit is declared in :data:`FAMILIES` (name,
type, unit, labels, help). The device gauges are derived from
:data:`allsmi.fields.MEASUREMENTS`, so a new measured field becomes a gauge
without an edit here. :func:`build_families` turns one snapshot (plus the
accumulated counters, when serving) into prometheus_client metric families;
``docs/metrics.md`` is generated from the same declarations
(:mod:`allsmi.exporter.reference`).

Rules the builder keeps:

* an unknown value (``None``) is left out, never exported as 0 or NaN;
* every series carries only the join labels; identity lives in
  ``allsmi_device_info``;
* board-level quantities appear only where the schema puts them (on the
  owning device), so ``sum by (resource_group)`` never counts a board twice;
* a device that is not in the snapshot has no series at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from allsmi.exporter.holders import HOLDER_FORGET_AFTER_SECONDS
from allsmi.fields import ENERGY_FIELD, MEASUREMENTS, PROCESS_MEASUREMENTS
from allsmi.schema import DeviceSample, Snapshot
from allsmi.usage import billing_shares

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
    (Family(m.metric, "gauge", m.help, DEVICE_LABELS, _unit_of(m.metric),
            source=f"{m.field} ({m.unit})" + (f" x {m.scale:g}" if m.scale != 1.0 else ""),
            condition=("board-level: only on the device that owns the board, never on its "
                       "partitions; " if m.board_level else "") + "omitted when unknown"),
     m.field, m.scale)
    for m in MEASUREMENTS)
"""(family, schema field, scale) for each device gauge, from :data:`allsmi.fields.MEASUREMENTS`."""

ENERGY_TOTAL = Family(
    ENERGY_FIELD.metric, "counter",
    "Energy the board used since the exporter started, in joules: deltas of the device's "
    "hardware energy counter (resets handled), else its power integrated over time.",
    DEVICE_LABELS, "joules",
    source="allsmi.usage: energy_joules deltas, else trapezoid of power_watts; gaps longer "
    "than --energy-max-gap are not bridged",
    condition="devices with an energy counter or a power reading (board owners only)")
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
    "utilization stayed below [accounting] idle_threshold_percent, since the exporter started.",
    DEVICE_LABELS, "seconds",
    source="allsmi.usage: trapezoid of (held and utilization_percent < idle_threshold_percent); "
    "never more than allsmi_device_allocated_seconds_total",
    condition="devices whose processes or workloads and utilization are known; omitted for good "
    "(until the exporter restarts) once a held device's utilization was unknown, never a known 0")
OBSERVED_TOTAL = Family(
    "allsmi_device_observed_seconds_total", "counter",
    "Time covered by valid samples since the exporter started: the denominator for coverage.",
    DEVICE_LABELS, "seconds", source="allsmi.usage: intervals between consecutive valid samples",
    condition="every device seen with health ok or degraded")
COUNTERS: tuple[tuple[Family, str], ...] = (
    (ENERGY_TOTAL, "energy_joules"), (BUSY_TOTAL, "busy_seconds"),
    (ALLOCATED_TOTAL, "allocated_seconds"), (IDLE_ALLOCATED_TOTAL, "idle_allocated_seconds"),
    (OBSERVED_TOTAL, "observed_seconds"))
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
HOLDER_COUNTERS: tuple[tuple[Family, str], ...] = (
    (HOLDER_ALLOCATED_TOTAL, "allocated_seconds"), (HOLDER_USED_TOTAL, "used_seconds"),
    (HOLDER_ENERGY_TOTAL, "energy_joules"))
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
:data:`allsmi.fields.PROCESS_MEASUREMENTS`."""
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

FAMILIES: tuple[Family, ...] = (
    (DEVICE_INFO, DEVICE_UP) + tuple(g for g, _, _ in GAUGES) + (PARTITION_SHARE,)
    + tuple(c for c, _ in COUNTERS) + tuple(c for c, _ in HOLDER_COUNTERS)
    + (RESOURCE_GROUP_INFO, PRICE_DEVICE_HOUR, PRICE_KWH, BUDGET_MONTH, WORKLOAD_INFO, PROCESS_MEMORY)
    + tuple(g for g, _, _ in PROCESS_GAUGES)
    + (BACKEND_UP, BACKEND_DURATION, BACKEND_ERRORS,
       LAST_COLLECT, BUILD_INFO, RENDER_ERRORS, LEDGER_WRITE_ERRORS, LEDGER_UNWRITTEN,
       LEDGER_DROPPED, LEDGER_REFUSED))
"""Every family the exporter can emit, in exposition order."""


@dataclass(frozen=True)
class CounterValues:
    """Accumulated counters of one device; ``None`` where the quantity is unknown."""

    created: float
    energy_joules: float | None
    busy_seconds: float | None
    allocated_seconds: float | None
    observed_seconds: float | None
    idle_allocated_seconds: float | None = None


@dataclass(frozen=True)
class BackendCounter:
    """Accumulated errors of one backend."""

    created: float
    errors: int


def _text(value: object) -> str:
    return "" if value is None else str(value)


def device_labels(dev: DeviceSample) -> list[str]:
    """The join label values of a device, in :data:`DEVICE_LABELS` order."""
    return [dev.id, _text(dev.index), dev.vendor, _text(dev.name), _text(dev.resource_group)]


def _info(family: Family) -> InfoMetricFamily:
    return InfoMetricFamily(family.name[:-len("_info")], family.help,
                            labels=[] if family is RESOURCE_GROUP_INFO else list(family.labels))


def _gauge(family: Family, labels: Sequence[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(family.name, family.help,
                             labels=list(family.labels if labels is None else labels),
                             unit=family.unit)


def _counter(family: Family) -> CounterMetricFamily:
    return CounterMetricFamily(family.name, family.help, labels=list(family.labels),
                               unit=family.unit)


def build_families(snapshot: Snapshot, *, version: str,
                   counters: Mapping[str, CounterValues] | None = None,
                   holder_counters: Mapping[tuple[str, ...], Any] | None = None,
                   backend_counters: Mapping[str, BackendCounter] | None = None,
                   backends_shown: Iterable[str] | None = None,
                   declared_groups: Mapping[str, Mapping[str, str]] | None = None,
                   group_prices: Mapping[str, GroupPrice] | None = None,
                   processes: bool = False) -> list[Metric]:
    """Every metric family for ``snapshot``, fresh (nothing is kept between calls).

    ``counters`` maps device id to its accumulated values; without it the
    counter families are left out (a single snapshot has no interval to
    count). ``backends_shown`` limits the backend families to those names
    (default: every backend that is not ``unavailable``). ``declared_groups``
    maps group name to its extra labels, so declared groups are listed even
    when no device uses them; ``group_prices`` their configured prices (for cost
    recording rules). ``processes`` adds per-process memory and activity.
    """
    devices = snapshot.devices
    labels = {dev.id: device_labels(dev) for dev in devices}
    out: list[Metric] = []

    info = _info(DEVICE_INFO)
    for dev in devices:
        info.add_metric([], {
            "uuid": dev.id, "index": _text(dev.index), "vendor": dev.vendor, "kind": dev.kind,
            "model": _text(dev.name), "resource_group": _text(dev.resource_group),
            "backend": dev.backend, "bus_id": _text(dev.bus_id),
            "driver_version": _text(dev.driver_version),
            "firmware_version": _text(dev.firmware_version), "parent_uuid": _text(dev.parent)})
    out.append(info)

    up = _gauge(DEVICE_UP)
    for dev in devices:
        if dev.health in ("ok", "degraded"):
            up.add_metric(labels[dev.id], 1.0)
        elif dev.health == "lost":
            up.add_metric(labels[dev.id], 0.0)
    out.append(up)

    for family, field, scale in GAUGES:
        gauge = _gauge(family)
        for dev in devices:
            value = getattr(dev, field)
            if value is not None:
                gauge.add_metric(labels[dev.id], float(value) * scale)
        out.append(gauge)

    if any(dev.parent for dev in devices):
        share = _gauge(PARTITION_SHARE)
        for dev_id, value in sorted(billing_shares(devices).items()):
            if dev_id in labels:
                share.add_metric(labels[dev_id], value)
        out.append(share)

    if counters is not None:
        for family, attr in COUNTERS:
            counter = _counter(family)
            for dev in devices:
                values = counters.get(dev.id)
                if values is None:
                    continue
                value = getattr(values, attr)
                if value is not None:
                    counter.add_metric(labels[dev.id], value, created=values.created)
            out.append(counter)
        present = {dev.id for dev in devices}
        for family, attr in HOLDER_COUNTERS:
            counter = _counter(family)
            for key, holder in (holder_counters or {}).items():
                value = getattr(holder, attr)
                if value is not None and key[0] in present:
                    counter.add_metric(list(key), value, created=holder.created)
            out.append(counter)

    groups: dict[str, Mapping[str, str]] = {}
    for dev in devices:
        if dev.resource_group is not None:
            groups.setdefault(dev.resource_group, dev.labels)
    for name, extra in (declared_groups or {}).items():
        groups[name] = extra
    group_info = _info(RESOURCE_GROUP_INFO)
    for name in sorted(groups):
        group_info.add_metric([], {**dict(groups[name]), "resource_group": name})
    out.append(group_info)
    out.extend(_price_families(group_prices or {}))

    out.append(_workload_family(devices, processes))

    if processes:
        out.append(_process_family(devices))
        out.extend(_process_activity_families(devices))

    out.extend(_backend_families(snapshot, backend_counters, backends_shown))

    last = _gauge(LAST_COLLECT)
    last.add_metric([], snapshot.unix_time)
    out.append(last)
    build = _info(BUILD_INFO)
    build.add_metric([version], {})
    out.append(build)
    return out


@dataclass(frozen=True)
class GroupPrice:
    """A declared group's prices (``None``: not priced) and currency."""

    per_device_hour: float | None
    per_kwh: float | None
    currency: str | None
    budget_per_month: float | None = None


def _price_families(prices: Mapping[str, GroupPrice]) -> list[Metric]:
    out: list[Metric] = []
    for family, attr in ((PRICE_DEVICE_HOUR, "per_device_hour"), (PRICE_KWH, "per_kwh"),
                         (BUDGET_MONTH, "budget_per_month")):
        gauge = _gauge(family)
        for name in sorted(prices):
            value = getattr(prices[name], attr)
            if value is not None:
                gauge.add_metric([name, _text(prices[name].currency)], float(value))
        out.append(gauge)
    return out


def _workload_family(devices: Iterable[DeviceSample], users: bool) -> InfoMetricFamily:
    """``allsmi_device_workload_info``: one series per device and workload (``user`` only
    with ``users``: people's names are published only with ``--processes``)."""
    info = _info(WORKLOAD_INFO)
    seen: set[tuple[str, ...]] = set()
    for dev in devices:
        for work in dev.workloads or ():
            values = (dev.id, _text(dev.resource_group), work.source, _text(work.namespace),
                      _text(work.pod), _text(work.container), _text(work.job_id),
                      _text(work.user) if users else "")
            if values in seen:
                continue  # a duplicate series would make the whole exposition invalid
            seen.add(values)
            info.add_metric([], dict(zip(WORKLOAD_LABELS, values)))
    return info


def _process_family(devices: Iterable[DeviceSample]) -> GaugeMetricFamily:
    gauge = _gauge(PROCESS_MEMORY)
    seen: set[tuple[str, int]] = set()
    for dev in devices:
        for proc in dev.processes or ():
            key = (dev.id, proc.pid)
            if proc.memory_bytes is None or key in seen:
                continue  # a duplicate series would make the whole exposition invalid
            seen.add(key)
            gauge.add_metric([dev.id, str(proc.pid), _text(proc.user),
                              _text(proc.command)[:COMMAND_MAX_CHARS]], float(proc.memory_bytes))
    return gauge


def _process_activity_families(devices: Sequence[DeviceSample]) -> Iterator[GaugeMetricFamily]:
    """One gauge per :data:`PROCESS_GAUGES` entry: a series per device and process whose
    figure is known (``None`` is left out, never 0), labelled like the process memory."""
    for family, field, scale in PROCESS_GAUGES:
        gauge = _gauge(family)
        seen: set[tuple[str, int]] = set()
        for dev in devices:
            for proc in dev.processes or ():
                value = getattr(proc, field)
                key = (dev.id, proc.pid)
                if value is None or key in seen:
                    continue  # a duplicate series would make the whole exposition invalid
                seen.add(key)
                gauge.add_metric([dev.id, str(proc.pid), _text(proc.user),
                                  _text(proc.command)[:COMMAND_MAX_CHARS]], value * scale)
        yield gauge


def _backend_families(snapshot: Snapshot, backend_counters: Mapping[str, BackendCounter] | None,
                      shown: Iterable[str] | None) -> Iterator[Metric]:
    names = set(shown) if shown is not None else \
        {b.name for b in snapshot.backends if b.status != "unavailable"}
    statuses = [b for b in snapshot.backends if b.name in names]
    up = _gauge(BACKEND_UP)
    duration = _gauge(BACKEND_DURATION)
    for status in statuses:
        up.add_metric([status.name], 1.0 if status.status == "ok" else 0.0)
        if status.duration_seconds is not None:
            duration.add_metric([status.name], float(status.duration_seconds))
    yield up
    yield duration
    if backend_counters is not None:
        errors = _counter(BACKEND_ERRORS)
        for status in statuses:
            entry = backend_counters.get(status.name)
            if entry is not None:
                errors.add_metric([status.name], float(entry.errors), created=entry.created)
        yield errors


@dataclass(frozen=True)
class ExporterHealth:
    """The exporter's own counts: render errors and, with ``--ledger``, the ledger's writes."""

    created: float
    render_errors: int
    ledger_write_errors: int | None = None
    ledger_unwritten: int | None = None
    ledger_dropped: int | None = None
    ledger_refused: int | None = None


def exporter_families(health: ExporterHealth) -> list[Metric]:
    """The exporter's own families (simple enough to render even when a cycle cannot be)."""
    render = _counter(RENDER_ERRORS)
    render.add_metric([], float(health.render_errors), created=health.created)
    out: list[Metric] = [render]
    if health.ledger_write_errors is not None:
        errors = _counter(LEDGER_WRITE_ERRORS)
        errors.add_metric([], float(health.ledger_write_errors), created=health.created)
        out.append(errors)
    if health.ledger_unwritten is not None:
        unwritten = _gauge(LEDGER_UNWRITTEN)
        unwritten.add_metric([], float(health.ledger_unwritten))
        out.append(unwritten)
    if health.ledger_dropped is not None:
        dropped = _counter(LEDGER_DROPPED)
        dropped.add_metric([], float(health.ledger_dropped), created=health.created)
        out.append(dropped)
    if health.ledger_refused is not None:
        refused = _counter(LEDGER_REFUSED)
        refused.add_metric([], float(health.ledger_refused), created=health.created)
        out.append(refused)
    return out
