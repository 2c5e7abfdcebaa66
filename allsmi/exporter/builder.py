"""The exporter's metric families built from a snapshot, from the declarations in
:mod:`allsmi.exporter.families`.

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

from allsmi.exporter.families import (ATTRIBUTION_BAD_SHARES, BACKEND_DURATION, BACKEND_ERRORS, BACKEND_UP, BUDGET_MONTH,
                                      BUILD_INFO, COMMAND_MAX_CHARS, COUNTERS, DEVICE_INFO,
                                      DEVICE_UP, GAUGE_SOURCES, GAUGES, HOLDER_COUNTERS,
                                      HOLDER_OVERFLOW, HOLDER_WAITING_TOTAL,
                                      LAST_COLLECT, LEDGER_DROPPED, LEDGER_REFUSED,
                                      LEDGER_UNWRITTEN, LEDGER_WRITE_ERRORS, PARTITION_SHARE,
                                      PRICE_DEVICE_HOUR, PRICE_KWH, PROCESS_GAUGES, PROCESS_MEMORY,
                                      RENDER_ERRORS, RESOURCE_GROUP_INFO, WEB_CONFIG_RELOAD,
                                      WORKLOAD_INFO, WORKLOAD_LABELS, Family)
from allsmi.schema.fields import to_base
from allsmi.schema import WAITING_REASONS, DeviceSample, Snapshot
from allsmi.usage import billing_shares


@dataclass(frozen=True)
class CounterValues:
    """Accumulated counters of one device; ``None`` where the quantity is unknown."""

    created: float
    energy_joules: float | None
    busy_seconds: float | None
    allocated_seconds: float | None
    observed_seconds: float | None
    idle_allocated_seconds: float | None = None
    active_seconds: float | None = None
    active_allocated_seconds: float | None = None
    """The allocated seconds of the intervals whose activity was known (active's denominator)."""
    interconnect_rx_bytes: float | None = None
    interconnect_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    pcie_tx_bytes: float | None = None
    claim_conflicts: float | None = None
    """Cycles in which the device was claimed by holders of sources that say nothing of each
    other; ``None`` while no attribution source knows its holders."""


@dataclass(frozen=True)
class BackendCounter:
    """Accumulated errors of one backend."""

    created: float
    errors: int


def _text(value: object) -> str:
    return "" if value is None else str(value)


def device_labels(dev: DeviceSample) -> list[str]:
    """The join label values of a device, in :data:`allsmi.exporter.families.DEVICE_LABELS` order."""
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
                   processes: bool = False,
                   bad_shares: Mapping[tuple[str, str], BackendCounter] | None = None
                   ) -> list[Metric]:
    """Every metric family for ``snapshot``, fresh (nothing is kept between calls).

    ``counters`` maps device id to its accumulated values; without it the
    counter families are left out (a single snapshot has no interval to
    count). ``backends_shown`` limits the backend families to those names
    (default: every backend that is not ``unavailable``). ``declared_groups``
    maps group name to its extra labels, so declared groups are listed even
    when no device uses them; ``group_prices`` their configured prices (for cost
    recording rules). ``processes`` adds per-process memory and activity. ``bad_shares``: the
    declared shares not billed as written since start-up, by (source, reason) (``errors``).
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
        source = GAUGE_SOURCES.get(family.name)
        for dev in devices:
            value = getattr(dev, field)
            if value is not None:
                if source is None:
                    gauge.add_metric(labels[dev.id], to_base(float(value), scale))
                else:
                    gauge.add_metric([*labels[dev.id], getattr(dev, source) or "unknown"],
                                     to_base(float(value), scale))
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
        waiting = _counter(HOLDER_WAITING_TOTAL)
        for key, holder in (holder_counters or {}).items():
            waits = getattr(holder, "waiting_seconds", None)
            if waits is not None and key[0] in present:
                for reason, value in zip(WAITING_REASONS, waits):
                    if value > 0:  # a reason the holder never spent time on has no series
                        waiting.add_metric([*key, reason], value, created=holder.created)
        out.append(waiting)

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
    if bad_shares is not None:
        ignored = _counter(ATTRIBUTION_BAD_SHARES)
        for key in sorted(bad_shares):
            ignored.add_metric(list(key), float(bad_shares[key].errors),
                               created=bad_shares[key].created)
        out.append(ignored)

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
                                  _text(proc.command)[:COMMAND_MAX_CHARS]], to_base(value, scale))
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
    holder_overflow_seconds: float | None = None
    ledger_write_errors: int | None = None
    ledger_unwritten: int | None = None
    ledger_dropped: int | None = None
    ledger_refused: int | None = None
    web_config_reloaded: bool | None = None
    """Whether the last change of ``--web-config`` (or a file it names) loaded; ``None``
    without one."""


def exporter_families(health: ExporterHealth) -> list[Metric]:
    """The exporter's own families (simple enough to render even when a cycle cannot be); the
    ledger's only with ``--ledger`` (their counts are ``None`` without it)."""
    out: list[Metric] = []
    for family, value in ((RENDER_ERRORS, health.render_errors),
                          (HOLDER_OVERFLOW, health.holder_overflow_seconds),
                          (LEDGER_WRITE_ERRORS, health.ledger_write_errors),
                          (LEDGER_UNWRITTEN, health.ledger_unwritten),
                          (LEDGER_DROPPED, health.ledger_dropped),
                          (LEDGER_REFUSED, health.ledger_refused),
                          (WEB_CONFIG_RELOAD, health.web_config_reloaded)):
        if value is None:
            continue
        if family.type == "counter":
            metric: Metric = _counter(family)
            metric.add_metric([], float(value), created=health.created)
        else:
            metric = _gauge(family)
            metric.add_metric([], float(value))
        out.append(metric)
    return out
