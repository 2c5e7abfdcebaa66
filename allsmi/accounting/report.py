"""Billing rows: usage per device, grouped, priced and checked for coverage.

Both sources (the ledger and Prometheus) produce :class:`Part` records, one
per device (and per user where known) with the dimensions in force; this
module groups them by the ``--group-by`` keys and computes the columns.

* ``observed_device_hours``: time the devices were watched with valid samples;
* ``allocated_device_hours``: time a device had at least one process;
* ``used_device_hours``: utilization-weighted time (busy seconds);
* ``avg_utilization_ratio``: used / observed hours of the devices that report
  utilization (MIG instances and GPUs in MIG mode do not);
* ``billed_device_hours``: allocated device-hours weighted by each device's
  share of its physical device (1 for a whole device; a partition's share, its
  parent the rest), so a partitioned device is billed at most once per hour; in
  a group with ``partition_billing = "whole"`` it equals the allocated hours;
* ``energy_kwh``: board energy (partitions carry none, so nothing is counted twice);
* ``cost`` = billed_device_hours x price_per_device_hour + energy_kwh x
  price_per_kwh, with the group's prices from the configuration at export
  time; a price that is not set charges nothing, and with neither price set
  the cost is empty (never an invented 0);
* ``coverage_ratio`` = observed hours / (device_count x window hours). A device
  that moved to another group mid-window appears in both groups' rows with
  the part of the window it spent there; the overall coverage (exit status)
  counts it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from allsmi.accounting.periods import Window
from allsmi.config import Config

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Part:
    """Usage of one device (or one user's share of it) over the window, in seconds and joules."""

    resource_group: str
    labels: Labels
    vendor: str
    model: str
    host: str
    device: str
    """Unique across hosts, e.g. ``host/device-id``."""
    observed_s: float
    allocated_s: float | None
    busy_s: float | None
    busy_observed_s: float
    energy_j: float | None
    mem_sum: float | None = None
    mem_samples: int = 0
    mem_peak: float | None = None
    user: str | None = None
    """Set on user shares; ``None`` on device totals and on the unattributed share."""
    billed_s: float | None = None
    """Allocated seconds x the billing share; ``None``: as allocated (a whole device, or a
    source that does not know shares)."""


@dataclass(frozen=True)
class Row:
    """One line of the export."""

    window: Window
    resource_group: str
    labels: Labels
    vendor: str | None
    model: str | None
    host: str | None
    user: str | None
    device_count: int
    observed_device_hours: float
    allocated_device_hours: float | None
    billed_device_hours: float | None
    used_device_hours: float | None
    avg_utilization_ratio: float | None
    energy_kwh: float | None
    avg_memory_used_bytes: float | None
    peak_memory_used_bytes: float | None
    price_per_device_hour: float | None
    price_per_kwh: float | None
    cost: float | None
    currency: str | None
    coverage_ratio: float | None


@dataclass(frozen=True)
class Report:
    """All rows of one export, and the coverage of the whole window."""

    window: Window
    group_by: tuple[str, ...]
    rows: tuple[Row, ...]
    label_names: tuple[str, ...]
    coverage_ratio: float | None
    """Observed device time over (distinct devices x window), all rows; ``None`` with no devices."""
    source: str


_Key = tuple[str, Labels, "str | None", "str | None", "str | None"]


def _key(part: Part, group_by: Sequence[str]) -> _Key:
    return (part.resource_group, part.labels,
            part.vendor if "vendor" in group_by else None,
            part.model if "model" in group_by else None,
            part.host if "host" in group_by else None)


def _sort_key(key: tuple[object, ...]) -> tuple[object, ...]:
    return tuple("" if v is None else v for v in key)


@dataclass
class _Acc:
    devices: set[str]
    observed: float = 0.0
    allocated: float | None = None
    busy: float | None = None
    busy_observed: float = 0.0
    energy: float | None = None
    mem_sum: float | None = None
    mem_samples: int = 0
    mem_peak: float | None = None
    billed: float | None = None

    def add(self, p: Part) -> None:
        self.devices.add(p.device)
        self.observed += p.observed_s
        if p.allocated_s is not None:
            self.allocated = (self.allocated or 0.0) + p.allocated_s
            billed = p.billed_s if p.billed_s is not None else p.allocated_s
            self.billed = (self.billed or 0.0) + billed
        if p.busy_s is not None:
            self.busy = (self.busy or 0.0) + p.busy_s
            self.busy_observed += p.busy_observed_s
        if p.energy_j is not None:
            self.energy = (self.energy or 0.0) + p.energy_j
        if p.mem_sum is not None:
            self.mem_sum = (self.mem_sum or 0.0) + p.mem_sum
            self.mem_samples += p.mem_samples
        if p.mem_peak is not None:
            self.mem_peak = p.mem_peak if self.mem_peak is None else max(self.mem_peak, p.mem_peak)


def _accumulate(parts: Iterable[Part], key_of) -> dict:  # type: ignore[no-untyped-def, type-arg]
    accs: dict = {}  # type: ignore[type-arg]
    # Sorted so that float sums, and so the output bytes, do not depend on source order.
    for part in sorted(parts, key=lambda p: (_sort_key(key_of(p)), p.device, p.user or "")):
        key = key_of(part)
        acc = accs.get(key)
        if acc is None:
            acc = accs[key] = _Acc(set())
        acc.add(part)
    return accs


def build_report(device_parts: Iterable[Part], window: Window, group_by: Sequence[str],
                 config: Config, user_parts: Iterable[Part] | None = None,
                 source: str = "") -> Report:
    """Group, price and check coverage. ``user_parts`` is needed when grouping by user."""
    group_by = tuple(group_by)
    by_user = "user" in group_by
    devices = _accumulate(device_parts, lambda p: _key(p, group_by))
    seconds = max(window.seconds, 1)
    # Distinct devices: one that changed group mid-window is expected once, not once per group.
    seen = set().union(*(acc.devices for acc in devices.values())) if devices else set()
    total_observed = sum(acc.observed for acc in devices.values())
    coverage = total_observed / (len(seen) * seconds) if seen else None

    if by_user:
        if user_parts is None:
            raise ValueError("grouping by user needs the user shares")
        accs = _accumulate(user_parts, lambda p: _key(p, group_by) + (p.user,))
    else:
        accs = {k + (None,): v for k, v in devices.items()}

    rows: list[Row] = []
    label_names: set[str] = set()
    for key in sorted(accs, key=_sort_key):
        acc = accs[key]
        group, labels, vendor, model, host, user = key
        label_names.update(name for name, _ in labels)
        whole = devices.get(key[:5], acc)  # with users, count and coverage are the devices'
        count = len(whole.devices)
        grp = config.group(group)
        # Unknown allocation (no backend listed processes) stays unknown, and so does a
        # cost that depends on it: never a made-up 0.
        allocated_h = None if acc.allocated is None else acc.allocated / 3600.0
        billed_h = allocated_h if grp.partition_billing == "whole" or acc.billed is None \
            else acc.billed / 3600.0
        kwh = None if acc.energy is None else acc.energy / 3.6e6
        cost: float | None = None
        priced_hours_unknown = grp.price_per_device_hour is not None and billed_h is None
        if (grp.price_per_device_hour is not None or grp.price_per_kwh is not None) \
                and not priced_hours_unknown:
            cost = 0.0
            if grp.price_per_device_hour is not None and billed_h is not None:
                cost += billed_h * grp.price_per_device_hour
            if grp.price_per_kwh is not None and kwh is not None:
                cost += kwh * grp.price_per_kwh
        rows.append(Row(
            window=window, resource_group=group, labels=labels, vendor=vendor, model=model,
            host=host, user=user if by_user else None, device_count=count,
            observed_device_hours=acc.observed / 3600.0, allocated_device_hours=allocated_h,
            billed_device_hours=billed_h,
            used_device_hours=None if acc.busy is None else acc.busy / 3600.0,
            avg_utilization_ratio=(acc.busy / acc.busy_observed
                                   if acc.busy is not None and acc.busy_observed > 0 else None),
            energy_kwh=kwh,
            avg_memory_used_bytes=(acc.mem_sum / acc.mem_samples
                                   if acc.mem_sum is not None and acc.mem_samples else None),
            peak_memory_used_bytes=acc.mem_peak,
            price_per_device_hour=grp.price_per_device_hour, price_per_kwh=grp.price_per_kwh,
            cost=cost, currency=grp.currency,
            coverage_ratio=whole.observed / (count * seconds) if count else None))
    return Report(window=window, group_by=group_by, rows=tuple(rows),
                  label_names=tuple(sorted(label_names)), coverage_ratio=coverage, source=source)
